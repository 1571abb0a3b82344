//! users and groups: the accounts cloud-init's cc_users_groups would create, checked against
//! the target's user database (gathered into `UserDb`) before anything is written.

use super::*;

/// A group in the target's database, or made by a group or user step planned so far.
pub(super) fn group_exists_before(b: &Builder<'_>, g: &str) -> bool {
    b.input.users.groups.iter().any(|x| x == g)
        || b.steps.iter().any(|s| match &s.action {
            Action::Group(x) => x.name == g,
            Action::User(u) => {
                u.groups.iter().any(|x| x == g)
                    || (!u.groups.is_empty() && u.primary_group.as_deref() == Some(g))
                    || (u.name == g && u.primary_group.is_none() && !u.no_user_group)
            }
            _ => false,
        })
}

pub(super) fn user(
    b: &mut Builder<'_>,
    i: usize,
    u: &crate::render::cloudconfig::UserEntry,
) -> Result<UserSpec> {
    let place = format!("users[{i}]");
    check_name(&u.name, format!("{place}.name"))?;
    for g in &u.groups.0 {
        check_name(g, format!("{place}.groups"))?;
    }
    if let Some(g) = &u.primary_group {
        check_name(g, format!("{place}.primary_group"))?;
        // cloud-init's add_user creates a missing primary group only when `groups` is given
        // too; alone, useradd fails and the user is never made. Refused here, before any write.
        if u.groups.0.is_empty() && b.input.users.known && !group_exists_before(b, g) {
            return Err(Error::not_found(
                Stage::Plan,
                format!("{place}.primary_group"),
                format!(
                    "group '{g}' does not exist and is not created before this user (cloud-init creates a primary group only together with groups:); add it to groups: or to the top-level groups:"
                ),
            ));
        }
    }
    check_user_fields(u, &place)?;
    other_user_keys(b, u, &place)?;
    let lock_passwd = u.lock_passwd.map(|f| f.0).unwrap_or(true);
    if !lock_passwd && u.plain_text_passwd.as_deref() == Some("") && u.hashed_passwd.is_none() {
        // cloud-init 24.3+ unlocks an empty password (`passwd -d`): anyone may log in.
        return Err(Error::unsupported(
            Stage::Plan,
            format!("{place}.plain_text_passwd"),
            "an empty password with lock_passwd: false makes an account anyone can log in to (cloud-init 24.3 and later do that); refused",
        ));
    }
    let sudo = match &u.sudo {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => crate::source::metadata::strings(items),
        Some(other) => {
            return Err(Error::invalid(
                Stage::Plan,
                format!("{place}.sudo"),
                crate::source::metadata::found("expected a rule string or a list", other),
            ));
        }
    };
    let (uid, inactive) = uid_and_inactive(u, &place)?;
    for (j, rule) in sudo.iter().enumerate() {
        if rule.trim().is_empty() || rule.chars().any(char::is_control) {
            return Err(Error::invalid(
                Stage::Plan,
                format!("{place}.sudo[{j}]"),
                "a sudo rule must be one non-empty line without control characters",
            ));
        }
    }
    check_new_user(b, u, uid, &place)?;
    for (key, set) in [
        ("ssh_authorized_keys", !u.ssh_authorized_keys.0.is_empty()),
        ("ssh_import_id", !u.ssh_import_id.0.is_empty()),
    ] {
        if (u.no_create_home.0 || u.system.0) && set {
            return Err(Error::invalid(
                Stage::Plan,
                format!("{place}.{key}"),
                "a user without a home (system or no_create_home) cannot have authorized keys",
            ));
        }
    }
    Ok(UserSpec {
        name: u.name.clone(),
        gecos: u.gecos.clone(),
        homedir: u.homedir.clone(),
        primary_group: u.primary_group.clone(),
        groups: u.groups.0.clone(),
        shell: u.shell.clone(),
        // cloud-init: `passwd` through useradd (new users only), then `plain_text_passwd`,
        // then `hashed_passwd`.
        passwd: u.hashed_passwd.clone().or_else(|| u.passwd.clone()),
        passwd_new_only: u.hashed_passwd.is_none() && u.passwd.is_some(),
        plain_text_passwd: u
            .plain_text_passwd
            .clone()
            .filter(|_| u.hashed_passwd.is_none()),
        lock_passwd,
        sudo,
        ssh_authorized_keys: u.ssh_authorized_keys.0.clone(),
        system: u.system.0,
        no_create_home: u.no_create_home.0,
        no_user_group: u.no_user_group.0,
        no_create_groups: u.create_groups.is_some_and(|f| !f.0),
        ssh_import_id: u.ssh_import_id.0.clone(),
        uid,
        inactive,
        expiredate: u.expiredate.clone(),
    })
}

/// One field of an /etc/passwd line (gecos, home, shell): no `:`, no control character.
pub(super) fn check_passwd_field(v: &str, place: String) -> Result<()> {
    if v.contains(':') || v.chars().any(char::is_control) {
        return Err(Error::invalid(
            Stage::Plan,
            place,
            "must not contain ':', a line break or another control character (it becomes a field of /etc/passwd)",
        ));
    }
    Ok(())
}

/// The fields of a user entry that end up in /etc/passwd, /etc/shadow or authorized_keys.
pub(super) fn check_user_fields(
    u: &crate::render::cloudconfig::UserEntry,
    place: &str,
) -> Result<()> {
    if let Some(g) = &u.gecos {
        check_passwd_field(g, format!("{place}.gecos"))?;
    }
    if let Some(h) = &u.homedir {
        check_passwd_field(h, format!("{place}.homedir"))?;
        if !h.starts_with('/') {
            return Err(Error::invalid(
                Stage::Plan,
                format!("{place}.homedir"),
                "must be an absolute path",
            ));
        }
    }
    if let Some(sh) = &u.shell {
        check_passwd_field(sh, format!("{place}.shell"))?;
    }
    for (key, hash) in [("passwd", &u.passwd), ("hashed_passwd", &u.hashed_passwd)] {
        if hash
            .as_deref()
            .is_some_and(|h| h.is_empty() || h.contains(':') || h.chars().any(char::is_control))
        {
            // The value is never shown: it is a password hash, or a password by mistake.
            return Err(Error::invalid(
                Stage::Plan,
                format!("{place}.{key}"),
                "not a password hash (empty, or contains ':' or a control character; value not shown)",
            ));
        }
    }
    if let Some(d) = &u.expiredate
        && !is_expiredate(d)
    {
        return Err(Error::invalid(
            Stage::Plan,
            format!("{place}.expiredate"),
            "not a date: want YYYY-MM-DD (a calendar date from 1970-01-01) or a number of days since 1970 (-1: never); useradd refuses it only after earlier steps have written",
        ));
    }
    for (j, k) in u.ssh_authorized_keys.0.iter().enumerate() {
        check_key_line(k, None, format!("{place}.ssh_authorized_keys[{j}]"))?;
    }
    Ok(())
}

/// A key as cloud-init writes it (`apply::authkeys`: a trailing newline stripped,
/// whitespace collapsed) must be one line: a line break or other control character left
/// inside it would add lines to authorized_keys. A comment, an empty entry or a line with
/// no known key type is left out at apply, as cloud-init leaves it out.
pub(super) fn check_key_line(k: &str, options: Option<&str>, place: String) -> Result<()> {
    let line = crate::apply::authkeys::parse(k, options);
    if line.is_key() && line.text().chars().any(|c| c.is_control() && c != '\t') {
        return Err(Error::invalid(
            Stage::Plan,
            place,
            "a key must be one line (it would add lines to authorized_keys)",
        ));
    }
    Ok(())
}

/// The user keys cloud-init's schema has besides the ones applied: `ssh_redirect_user`
/// (ignored with a warning, as cloud-init does without a default user; refused with keys
/// or a wrong value, where cloud-init stops the module), `selinux_user`, `snapuser` and
/// `doas` (refused: nodeagent sets no SELinux login mapping, makes no snap user and
/// writes no doas rules).
fn other_user_keys(
    b: &mut Builder<'_>,
    u: &crate::render::cloudconfig::UserEntry,
    place: &str,
) -> Result<()> {
    if let Some(v) = u
        .ssh_redirect_user
        .as_ref()
        .filter(|v| !matches!(v, Value::Null | Value::Bool(false)))
    {
        if !matches!(v, Value::Bool(true)) && v.as_str() != Some("default") {
            return Err(Error::invalid(
                Stage::Plan,
                format!("{place}.ssh_redirect_user"),
                "expected true, default or false",
            ));
        }
        if !u.ssh_authorized_keys.0.is_empty() || !u.ssh_import_id.0.is_empty() {
            return Err(Error::invalid(
                Stage::Plan,
                format!("{place}.ssh_redirect_user"),
                "cannot be given with ssh_authorized_keys or ssh_import_id",
            ));
        }
        b.warnings.push(format!(
            "{place}.ssh_redirect_user: ignored: there is no default user (cloud-init warns and ignores it the same)"
        ));
    }
    for (key, v, why) in [
        (
            "selinux_user",
            &u.selinux_user,
            "nodeagent sets no SELinux login mapping (useradd --selinux-user)",
        ),
        (
            "snapuser",
            &u.snapuser,
            "nodeagent makes no snap user (snap create-user, Ubuntu Core)",
        ),
        (
            "doas",
            &u.doas,
            "nodeagent writes no doas rules; give sudo rules",
        ),
    ] {
        if v.as_ref().is_some_and(|v| !v.is_null()) {
            return Err(Error::unsupported(
                Stage::Plan,
                format!("{place}.{key}"),
                why,
            ));
        }
    }
    Ok(())
}

/// `useradd --expiredate`: `YYYY-MM-DD` (a real calendar date, not before the epoch), days
/// since the epoch, or empty (no expiry). useradd's date parser takes more spellings
/// ("tomorrow"); cloud-init documents YYYY-MM-DD, and only what is sure to pass is planned.
fn is_expiredate(d: &str) -> bool {
    let d = d.trim();
    if d.is_empty() {
        return true;
    }
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|c| c.is_ascii_digit());
    if d == "-1" || digits(d, d.len()) {
        return d.len() <= 9;
    }
    let mut parts = d.split('-');
    let (Some(y), Some(m), Some(dd), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    if !(digits(y, 4) && digits(m, 2) && digits(dd, 2)) {
        return false;
    }
    let (y, m, dd) = (
        y.parse::<u32>().unwrap_or(0),
        m.parse::<u32>().unwrap_or(0),
        dd.parse::<u32>().unwrap_or(0),
    );
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days_in_month = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    y >= 1970 && (1..=days_in_month).contains(&dd)
}

/// What `useradd` refuses for a user that does not exist yet: a uid another user has, a
/// primary group that neither the target nor an earlier step has.
pub(super) fn check_new_user(
    b: &Builder<'_>,
    u: &crate::render::cloudconfig::UserEntry,
    uid: Option<u32>,
    place: &str,
) -> Result<()> {
    let db = b.input.users;
    if db.known && db.users.contains(&u.name) {
        return Ok(()); // apply leaves an existing user's uid and group alone
    }
    let planned = || {
        b.steps.iter().filter_map(|s| match &s.action {
            Action::User(o) => Some(o),
            _ => None,
        })
    };
    if let Some(uid) = uid {
        let owner = db
            .uids
            .iter()
            .find(|&(n, &id)| id == uid && *n != u.name)
            .map(|(n, _)| n.clone())
            .or_else(|| {
                planned()
                    .find(|o| o.uid == Some(uid) && o.name != u.name)
                    .map(|o| o.name.clone())
            });
        if let Some(other) = owner {
            return Err(Error::conflict(
                Stage::Plan,
                format!("{place}.uid"),
                format!("uid {uid} already belongs to user '{other}'"),
            ));
        }
    }
    if let Some(g) = &u.primary_group {
        let exists = if let Ok(gid) = g.parse::<u32>() {
            db.gids.values().any(|&id| id == gid) || (!db.known && gid == 0)
        } else {
            // As cloud-init's add_user: a missing primary group is created when `groups` is
            // given too (the check above refuses it alone).
            (!db.known && g == "root") || group_exists_before(b, g) || !u.groups.0.is_empty()
        };
        if !exists {
            return Err(Error::not_found(
                Stage::Plan,
                format!("{place}.primary_group"),
                format!(
                    "group '{g}' does not exist in the target and is not created before this user (add it under groups:)"
                ),
            ));
        }
    }
    Ok(())
}

/// `uid` (a number or a numeric string) and `inactive` (days, -1 or more), checked.
fn uid_and_inactive(
    u: &crate::render::cloudconfig::UserEntry,
    place: &str,
) -> Result<(Option<u32>, Option<String>)> {
    let uid = match &u.uid {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => n.as_u64().and_then(|v| u32::try_from(v).ok()),
        Some(Value::String(s)) => s.trim().parse().ok(),
        Some(_) => None,
    };
    if u.uid.as_ref().is_some_and(|v| !v.is_null()) && uid.is_none() {
        return Err(Error::invalid(
            Stage::Plan,
            format!("{place}.uid"),
            "not a valid numeric uid",
        ));
    }
    // (uid_t)-1 means "no change" to chown: useradd refuses it, and a home chowned to it
    // stays root's.
    if uid == Some(u32::MAX) {
        return Err(Error::invalid(
            Stage::Plan,
            format!("{place}.uid"),
            "4294967295 is (uid_t)-1, which chown reads as \"no change\" and useradd refuses (0 to 4294967294)",
        ));
    }
    let inactive = match &u.inactive {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    if inactive
        .as_deref()
        .is_some_and(|d| d.trim().parse::<i64>().map_or(true, |n| n < -1))
    {
        return Err(Error::invalid(
            Stage::Plan,
            format!("{place}.inactive"),
            "not a number of days (-1 or more)",
        ));
    }
    Ok((uid, inactive))
}

#[cfg(test)]
mod tests {
    /// What useradd reads for sure passes; what it refuses (or reads differently) does not.
    #[test]
    fn expiredate_is_a_date_days_or_empty() {
        for ok in [
            "",
            "2030-01-31",
            "2028-02-29",
            "1970-01-01",
            "0",
            "20000",
            "-1",
            " 2030-12-31 ",
        ] {
            assert!(super::is_expiredate(ok), "{ok:?}");
        }
        for bad in [
            "not-a-date",
            "2026-02-30",
            "2027-02-29",
            "2030-13-01",
            "2030-1-1",
            "1969-12-31",
            "-2",
            "+5",
            "2030-01-01x",
            "30-01-2030",
            "1234567890",
            "2030/01/01",
            "２０３０-01-01",
        ] {
            assert!(!super::is_expiredate(bad), "{bad:?}");
        }
    }
}
