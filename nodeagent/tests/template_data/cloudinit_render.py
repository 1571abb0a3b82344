#!/usr/bin/env python3
"""Reference renderer: cloud-init's user-data jinja path, re-created with real jinja2.

Reads a JSON list of cases ({"name", "userdata", "data"}) on stdin and prints a JSON list
of results ({"name", "text" | null, "warnings", "error" | null, "line" | null,
"skipped" | null: why cloud-init's jinja handler would not pass the rendered part on}).

Mirrors cloud-init 26.2 (docs/formats.md B.1-B.5): cloudinit/templater.py
(detect_template, jinja_render, UndefinedJinjaVariable, JinjaSyntaxParsingException) and
cloudinit/handlers/jinja_template.py (convert_jinja_instance_data,
get_jinja_variable_alias, render_jinja_payload). Used to (re)generate golden.json:
    python3 cloudinit_render.py < cases.json > golden.json   (see template_parity.rs)
"""
import json
import re
import sys

import jinja2
from jinja2 import TemplateSyntaxError
from jinja2 import Undefined as JUndefined
from jinja2.exceptions import UndefinedError as JUndefinedError
from jinja2.lexer import operator_re
from jinja2.sandbox import SandboxedEnvironment

MISSING_JINJA_PREFIX = "CI_MISSING_JINJA_VAR/"
TYPE_MATCHER = re.compile(r"##\s*template:(.*)", re.I)


class UndefinedJinjaVariable(JUndefined):
    def __str__(self):
        return "%s%s" % (MISSING_JINJA_PREFIX, self._undefined_name)

    def __sub__(self, other):
        other = str(other).replace(MISSING_JINJA_PREFIX, "")
        raise TypeError(
            'Undefined jinja variable: "{this}-{other}". Jinja tried'
            ' subtraction. Perhaps you meant "{this}_{other}"?'.format(
                this=self._undefined_name, other=other
            )
        )


class JinjaSyntaxParsingException(TemplateSyntaxError):
    def __init__(self, error):
        super().__init__(error.message or "unknown syntax error", error.lineno, error.name, error.filename)
        self.source = error.source

    def __str__(self):
        line_content = self.source.splitlines()[self.lineno - 2].strip()
        line_content = f": {line_content}" if line_content else ""
        return (
            "Unable to parse Jinja template due to syntax error: "
            f"{self.message} on line {self.lineno}{line_content}"
        )


# cloudinit/handlers/__init__.py INCLUSION_TYPES_MAP (user-data prefixes).
INCLUSION_TYPES_MAP = {
    "#include": "text/x-include-url",
    "#include-once": "text/x-include-once-url",
    "#!": "text/x-shellscript",
    "#cloud-config": "text/cloud-config",
    "#part-handler": "text/part-handler",
    "#cloud-boothook": "text/cloud-boothook",
    "#cloud-config-archive": "text/cloud-config-archive",
    "#cloud-config-jsonp": "text/cloud-config-jsonp",
    "## template: jinja": "text/jinja2",
}
# The jinja handler's sub-handlers: cloud-config (+jsonp), shell script, boothook.
SUB_HANDLER_TYPES = ("text/cloud-config", "text/cloud-config-jsonp", "text/x-shellscript", "text/cloud-boothook")


def type_from_starts_with(payload, default=None):
    payload_lc = payload.lower().lstrip()
    for text in sorted(INCLUSION_TYPES_MAP, key=len, reverse=True):
        if payload_lc.startswith(text):
            return INCLUSION_TYPES_MAP[text]
    return default


def get_jinja_variable_alias(orig_name):
    alias_name = re.sub(operator_re, "_", orig_name)
    if alias_name != orig_name:
        return alias_name
    return None


def convert_jinja_instance_data(data, prefix="", sep="/", include_key_aliases=False):
    result = {}
    for key, value in sorted(data.items()):
        key_path = "{0}{1}{2}".format(prefix, sep, key) if prefix else key
        if isinstance(value, dict):
            result[key] = convert_jinja_instance_data(value, key_path, sep=sep, include_key_aliases=include_key_aliases)
            if re.match(r"v\d+$", key):
                for subkey, subvalue in result[key].items():
                    result[subkey] = subvalue
        else:
            result[key] = value
        if include_key_aliases:
            alias_name = get_jinja_variable_alias(key)
            if alias_name:
                result[alias_name] = result[key]
    return result


def jinja_render(content, params):
    add = "\n" if content.endswith("\n") else ""
    try:
        env = SandboxedEnvironment(undefined=UndefinedJinjaVariable, trim_blocks=True, extensions=["jinja2.ext.do"])
        return env.from_string(content).render(**params) + add
    except TemplateSyntaxError as template_syntax_error:
        template_syntax_error.lineno += 1
        raise JinjaSyntaxParsingException(error=template_syntax_error) from template_syntax_error


def render_case(case):
    payload = case["userdata"]
    ident, _, rest = payload.partition("\n")
    m = TYPE_MATCHER.match(ident)
    assert m and m.group(1).lower().strip() == "jinja", "cases must carry a valid header"
    params = convert_jinja_instance_data(case["data"], include_key_aliases=True)
    out = {"name": case["name"], "text": None, "warnings": [], "error": None, "line": None, "skipped": None}
    try:
        text = jinja_render(rest, params)
    except JinjaSyntaxParsingException as e:
        out["error"] = str(e)
        out["line"] = e.lineno
        return out
    except (TypeError, JUndefinedError) as e:
        out["error"] = "dropped: " + str(e)
        return out
    except Exception as e:  # sandbox violations, bad operations...
        out["error"] = "failed: %s: %s" % (type(e).__name__, e)
        return out
    names = ["'%s'" % v.replace(MISSING_JINJA_PREFIX, "") for v in re.findall(r"%s[^\s]+" % MISSING_JINJA_PREFIX, text)]
    if names:
        out["warnings"] = ["Could not render jinja template variables in file 'userdata': %s" % ", ".join(names)]
    out["text"] = text
    # jinja_template.handle_part: empty output is skipped, unsupported types are ignored.
    if not text:
        out["skipped"] = "empty"
    elif type_from_starts_with(text) not in SUB_HANDLER_TYPES:
        out["skipped"] = "type %s" % type_from_starts_with(text)
    return out


def main():
    cases = json.load(sys.stdin)
    results = [render_case(c) for c in cases]
    json.dump({"jinja2": jinja2.__version__, "results": results}, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
