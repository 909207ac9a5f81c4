//! The Dockerfile subset stasis builds: FROM, RUN, COPY, ADD (local files
//! and archives only), ENV, WORKDIR, USER, ARG, ENTRYPOINT and CMD.
//! Comments, blank lines and `\` line continuations as Docker reads them.
//! Anything else -- an unknown instruction, a second FROM (multi-stage),
//! `COPY --from`, an `ADD` of a URL (the build has no network but its RUN
//! steps') -- is an error naming the line and the instruction.
//! Variables (`$X`, `${X}`, `${X:-default}`, `${X:+alt}`) are expanded at
//! build time by [`expand`], since ARG values come from the build.

use serde::{Deserialize, Serialize};
use stasis_core::{Error, Result};

/// A command in shell form (run with `/bin/sh -c`) or exec form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    Shell(String),
    Exec(Vec<String>),
}

impl Command {
    /// The argv to run.
    pub fn argv(&self) -> Vec<String> {
        match self {
            Command::Shell(s) => vec!["/bin/sh".into(), "-c".into(), s.clone()],
            Command::Exec(v) => v.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instruction {
    From(String),
    Run(Command),
    /// `COPY`/`ADD` sources (relative to the context), destination, and
    /// `--chown` when given.
    Copy {
        srcs: Vec<String>,
        dest: String,
        chown: Option<String>,
        add: bool,
    },
    Env(Vec<(String, String)>),
    Workdir(String),
    User(String),
    Arg {
        name: String,
        default: Option<String>,
    },
    Entrypoint(Command),
    Cmd(Command),
}

/// One instruction with the line it starts on and its text as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub line: usize,
    pub text: String,
    pub instr: Instruction,
}

fn err(line: usize, keyword: &str, why: impl std::fmt::Display) -> Error {
    Error::invalid(format!("Dockerfile line {line}: {keyword}: {why}")).with_field("dockerfile")
}

/// Parse a Dockerfile. The first instruction other than ARG must be the
/// only FROM.
pub fn parse(text: &str) -> Result<Vec<Step>> {
    let mut steps = Vec::new();
    let mut seen_from = false;
    for (line, logical) in logical_lines(text) {
        let logical = logical.trim();
        let (kw, rest) = match logical.find(char::is_whitespace) {
            Some(i) => (&logical[..i], logical[i..].trim()),
            None => (logical, ""),
        };
        let upper = kw.to_ascii_uppercase();
        if rest.is_empty() {
            return Err(err(line, &upper, "needs arguments"));
        }
        let instr =
            match upper.as_str() {
                "FROM" => {
                    if seen_from {
                        return Err(err(
                            line,
                            "FROM",
                            "multi-stage builds (a second FROM) are not supported",
                        ));
                    }
                    seen_from = true;
                    let words = split_words(rest).map_err(|e| err(line, "FROM", e))?;
                    match words.as_slice() {
                        [image] => Instruction::From(image.clone()),
                        [_, as_kw, _] if as_kw.eq_ignore_ascii_case("as") => {
                            return Err(err(line, "FROM", "named stages (AS) are not supported"))
                        }
                        _ => return Err(err(line, "FROM", "expects one image name")),
                    }
                }
                "RUN" => Instruction::Run(command(rest)),
                "CMD" => Instruction::Cmd(command(rest)),
                "ENTRYPOINT" => Instruction::Entrypoint(command(rest)),
                "COPY" | "ADD" => copy(line, &upper, rest)?,
                "ENV" => Instruction::Env(env_pairs(line, rest)?),
                "WORKDIR" => Instruction::Workdir(rest.to_string()),
                "USER" => Instruction::User(rest.to_string()),
                "ARG" => {
                    let words = split_words(rest).map_err(|e| err(line, "ARG", e))?;
                    let [w] = words.as_slice() else {
                        return Err(err(line, "ARG", "expects one NAME[=default]"));
                    };
                    let (name, default) = match w.split_once('=') {
                        Some((n, d)) => (n.to_string(), Some(d.to_string())),
                        None => (w.clone(), None),
                    };
                    check_var_name(line, "ARG", &name)?;
                    Instruction::Arg { name, default }
                }
                _ => return Err(err(
                    line,
                    &upper,
                    "is not supported (supported: FROM, RUN, COPY, ADD, ENV, WORKDIR, USER, ARG, \
                     ENTRYPOINT, CMD)",
                )),
            };
        if !seen_from && !matches!(instr, Instruction::Arg { .. }) {
            return Err(err(line, &upper, "comes before FROM"));
        }
        steps.push(Step {
            line,
            text: logical.to_string(),
            instr,
        });
    }
    if !seen_from {
        return Err(Error::invalid("Dockerfile has no FROM").with_field("dockerfile"));
    }
    Ok(steps)
}

/// Join continuation lines; drop comments and blank lines.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut cur: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let t = raw.trim();
        if t.starts_with('#') || (t.is_empty() && cur.is_none()) {
            continue;
        }
        let (body, cont) = match raw.trim_end().strip_suffix('\\') {
            Some(b) => (b, true),
            None => (raw, false),
        };
        let entry = cur.get_or_insert_with(|| (i + 1, String::new()));
        if !entry.1.is_empty() {
            entry.1.push(' ');
        }
        entry.1.push_str(body.trim());
        if !cont {
            out.extend(cur.take());
        }
    }
    out.extend(cur.take());
    out.retain(|(_, s)| !s.trim().is_empty());
    out
}

/// Exec form when the arguments are a JSON array of strings, else shell form.
fn command(rest: &str) -> Command {
    if rest.starts_with('[') {
        if let Ok(v) = serde_json::from_str::<Vec<String>>(rest) {
            return Command::Exec(v);
        }
    }
    Command::Shell(rest.to_string())
}

fn copy(line: usize, kw: &str, rest: &str) -> Result<Instruction> {
    let mut raw = rest.trim_start();
    let mut chown = None;
    while raw.starts_with("--") {
        let (flag, tail) = raw.split_at(raw.find(char::is_whitespace).unwrap_or(raw.len()));
        raw = tail.trim_start();
        if let Some(v) = flag.strip_prefix("--chown=") {
            chown = Some(v.to_string());
        } else if flag.starts_with("--from") {
            return Err(err(
                line,
                kw,
                "--from (multi-stage builds) is not supported",
            ));
        } else {
            return Err(err(line, kw, format!("flag {flag} is not supported")));
        }
    }
    let words = if raw.starts_with('[') {
        serde_json::from_str::<Vec<String>>(raw)
            .map_err(|_| err(line, kw, "malformed JSON form"))?
    } else {
        split_words(raw).map_err(|e| err(line, kw, e))?
    };
    if words.len() < 2 {
        return Err(err(
            line,
            kw,
            "expects at least one source and a destination",
        ));
    }
    let (srcs, dest) = words.split_at(words.len() - 1);
    for s in srcs {
        check_local(line, kw, s)?;
    }
    Ok(Instruction::Copy {
        srcs: srcs.to_vec(),
        dest: dest[0].clone(),
        chown,
        add: kw == "ADD",
    })
}

/// `COPY`/`ADD` take local files only: a URL or remote repository (as
/// written, or once variables are expanded) is refused, saying why.
pub(crate) fn check_local(line: usize, kw: &str, src: &str) -> Result<()> {
    if src.contains("://") || src.starts_with("git@") {
        return Err(err(
            line,
            kw,
            format!(
                "{src:?}: only local files from the build context can be added, not a URL or \
                 remote repository: the build itself has no network, only RUN steps reach it \
                 under the build's network policy (--network-allow); fetch it in a RUN step \
                 or put it in the context"
            ),
        ));
    }
    Ok(())
}

fn check_var_name(line: usize, kw: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(err(line, kw, format!("{name:?} is not a variable name")))
    }
}

fn env_pairs(line: usize, rest: &str) -> Result<Vec<(String, String)>> {
    let words = split_words(rest).map_err(|e| err(line, "ENV", e))?;
    let first = &words[0];
    if !first.contains('=') {
        // Legacy `ENV KEY value with spaces`.
        check_var_name(line, "ENV", first)?;
        let value = rest[rest.find(char::is_whitespace).unwrap_or(rest.len())..].trim();
        if value.is_empty() {
            return Err(err(line, "ENV", format!("{first} has no value")));
        }
        return Ok(vec![(first.clone(), value.to_string())]);
    }
    words
        .iter()
        .map(|w| {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| err(line, "ENV", format!("{w:?} is not KEY=value")))?;
            check_var_name(line, "ENV", k)?;
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}

/// Split on whitespace honouring single and double quotes and backslash
/// escapes (quotes removed). `$` references are left for [`expand`].
pub fn split_words(s: &str) -> std::result::Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (Some(q), c) if c == q => quote = None,
            (Some('\''), c) => cur.push(c),
            (_, '\\') => {
                in_word = true;
                match chars.next() {
                    Some('$') => cur.push_str("\\$"),
                    Some(n) => cur.push(n),
                    None => cur.push('\\'),
                }
            }
            (_, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err("unterminated quote".into());
    }
    if in_word {
        out.push(cur);
    }
    Ok(out)
}

/// Expand `$X`, `${X}`, `${X:-default}` and `${X:+alt}` from `vars`
/// (unset -> empty); `\$` is a literal `$`.
pub fn expand(
    s: &str,
    vars: &dyn Fn(&str) -> Option<String>,
) -> std::result::Result<String, String> {
    let b: Vec<char> = s.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            '\\' if b.get(i + 1) == Some(&'$') => {
                out.push('$');
                i += 2;
            }
            '$' if b.get(i + 1) == Some(&'{') => {
                let end = b[i..]
                    .iter()
                    .position(|&c| c == '}')
                    .ok_or_else(|| format!("unterminated ${{ in {s:?}"))?;
                let inner: String = b[i + 2..i + end].iter().collect();
                let value = if let Some((name, d)) = inner.split_once(":-") {
                    vars(name)
                        .filter(|v| !v.is_empty())
                        .unwrap_or_else(|| d.to_string())
                } else if let Some((name, alt)) = inner.split_once(":+") {
                    match vars(name) {
                        Some(v) if !v.is_empty() => alt.to_string(),
                        _ => String::new(),
                    }
                } else {
                    vars(&inner).unwrap_or_default()
                };
                out.push_str(&value);
                i += end + 1;
            }
            '$' if b
                .get(i + 1)
                .is_some_and(|c| c.is_ascii_alphabetic() || *c == '_') =>
            {
                let mut j = i + 1;
                while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == '_') {
                    j += 1;
                }
                let name: String = b[i + 1..j].iter().collect();
                out.push_str(&vars(&name).unwrap_or_default());
                i = j;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // fixtures on the tests' own temp dirs
#[path = "dockerfile_tests.rs"]
mod tests;
