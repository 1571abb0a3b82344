"""The live template oracle: cloud-init's own user-data jinja path, run by a Debian
cloud-init root's python3 chrooted into that root (template_parity.rs starts it; nothing of
cloud-init is re-created here).

Reads a JSON list of cases ({"name", "userdata", "data"}) on stdin and prints
{"cloud_init", "jinja2", "results": [{"name", "text" | null, "warnings", "error" | null,
"line" | null, "skipped" | null}]} on stdout.

Each case goes through cloud-init's JinjaTemplatePartHandler.handle_part exactly as a boot
sends a `## template: jinja` user-data part through it: the case's data is the
instance-data-sensitive.json it reads (cloudinit.helpers.Paths over a scratch run_dir), its
sub-handlers are the ones cloudinit.stages.Init._default_handlers gives it in this release,
replaced by recorders of the payload they are handed. Observed, not re-computed:
- `text`: what cloud-init's render_jinja_payload returned (the rendered part);
- `warnings`: the "Could not render jinja template variables" warnings it logged;
- `skipped`: why handle_part passed nothing on (empty result, no sub-handler for its type);
- `error`/`line`: a template syntax error (`line` is the user-data line: 22.4 reports jinja's
  line in the body after the header line, 24.1+ adds that line itself), or the part dropped
  ("dropped: ..." for cloud-init's own TypeError/UndefinedError path, "failed: ..." for
  anything else cloud-init let through).
"""
import json
import logging
import os
import sys
import tempfile

import jinja2
from cloudinit import helpers, stages, version
from cloudinit.handlers import jinja_template as jt
from cloudinit.settings import PER_INSTANCE


class Recorder:
    """Stands for a sub-handler (cloud-config, shell script, boothook): keeps the payload."""

    def __init__(self, handler_version):
        self.handler_version = handler_version
        self.payload = None

    def handle_part(self, _data, _ctype, _filename, payload, *_rest):
        self.payload = payload


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        if record.levelno >= logging.WARNING:
            self.messages.append(record.getMessage())


def main():
    cases = json.load(sys.stdin)
    records = Records()
    logging.getLogger().addHandler(records)
    logging.getLogger().setLevel(logging.DEBUG)
    run_dir = tempfile.mkdtemp()
    paths = helpers.Paths({"run_dir": run_dir, "cloud_dir": run_dir})
    init = stages.Init.__new__(stages.Init)
    init._paths, init.datasource = paths, None  # what Init.paths returns once set
    [handler] = [h for h in init._default_handlers() if isinstance(h, jt.JinjaTemplatePartHandler)]

    # render_jinja_payload (called by render_jinja_payload_from_file, which turns an empty
    # result into None) returns the rendered text, or None when it dropped the part.
    seen = {}
    real = jt.render_jinja_payload

    def observed(*args, **kwargs):
        try:
            seen["text"] = real(*args, **kwargs)
            return seen["text"]
        except Exception as e:
            seen["exc"] = e
            raise
    jt.render_jinja_payload = observed

    results = []
    for case in cases:
        with open(paths.get_runpath("instance_data_sensitive"), "w") as f:
            json.dump(case["data"], f)
        recorders = {t: Recorder(h.handler_version) for t, h in handler.sub_handlers.items()}
        handler.sub_handlers = recorders
        seen.clear()
        records.messages.clear()
        out = {"name": case["name"], "text": None, "warnings": [], "error": None, "line": None,
               "skipped": None}
        try:
            handler.handle_part(None, "text/jinja2", "userdata", case["userdata"], PER_INSTANCE, {})
        except Exception as e:  # what cloud-init's part handler lets through (22.4: syntax errors)
            seen.setdefault("exc", e)
        exc = seen.get("exc")
        logged = list(records.messages)
        out["warnings"] = [m for m in logged if m.startswith("Could not render jinja template variables")]
        if exc is not None:
            if isinstance(exc, jinja2.TemplateSyntaxError):
                # 24.1+ raises its own subclass with the header line already counted.
                header = 0 if type(exc).__name__ == "JinjaSyntaxParsingException" else 1
                out["error"] = str(exc)
                out["line"] = exc.lineno + header
            else:
                out["error"] = "failed: %s: %s" % (type(exc).__name__, exc)
        elif seen.get("text") is None:
            dropped = [m for m in logged if m.startswith("Ignoring jinja template")]
            out["error"] = "dropped: " + " ".join(dropped)
        else:
            out["text"] = seen["text"]
            if not any(r.payload is not None for r in recorders.values()):
                ignored = [m for m in logged if "Could not find supported sub-handler" in m]
                out["skipped"] = "empty" if not seen["text"] else " ".join(ignored) or "not passed on"
        results.append(out)
    json.dump({"cloud_init": version.version_string(), "jinja2": jinja2.__version__,
               "results": results}, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
