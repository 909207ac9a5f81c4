use super::*;

#[test]
fn parses_the_supported_subset_with_lines_and_continuations() {
    let df = "# syntax comment\n\
              ARG BASE=stasis-base\n\
              FROM $BASE\n\
              \n\
              ENV A=1 B=\"two words\"\n\
              ENV LEGACY some value\n\
              WORKDIR /app\n\
              COPY --chown=1000:1000 src/ lib/ /app/\n\
              ADD [\"data.txt\", \"/data\"]\n\
              RUN apt-get update && \\\n\
              # a comment inside the continuation\n\
                  echo done\n\
              RUN [\"python3\", \"-c\", \"print(1)\"]\n\
              USER app\n\
              ENTRYPOINT [\"python3\"]\n\
              CMD -c 'print(2)'\n";
    let steps = parse(df).unwrap();
    let kinds: Vec<_> = steps.iter().map(|s| s.line).collect();
    assert_eq!(kinds, vec![2, 3, 5, 6, 7, 8, 9, 10, 13, 14, 15, 16]);
    assert_eq!(
        steps[0].instr,
        Instruction::Arg {
            name: "BASE".into(),
            default: Some("stasis-base".into())
        }
    );
    assert_eq!(steps[1].instr, Instruction::From("$BASE".into()));
    assert_eq!(
        steps[2].instr,
        Instruction::Env(vec![
            ("A".into(), "1".into()),
            ("B".into(), "two words".into())
        ])
    );
    assert_eq!(
        steps[3].instr,
        Instruction::Env(vec![("LEGACY".into(), "some value".into())])
    );
    assert_eq!(
        steps[5].instr,
        Instruction::Copy {
            srcs: vec!["src/".into(), "lib/".into()],
            dest: "/app/".into(),
            chown: Some("1000:1000".into()),
            add: false
        }
    );
    assert!(
        matches!(&steps[6].instr, Instruction::Copy { add: true, srcs, .. } if srcs == &["data.txt"])
    );
    assert_eq!(
        steps[7].instr,
        Instruction::Run(Command::Shell("apt-get update && echo done".into()))
    );
    assert_eq!(
        steps[8].instr,
        Instruction::Run(Command::Exec(vec![
            "python3".into(),
            "-c".into(),
            "print(1)".into()
        ]))
    );
    assert_eq!(
        steps[11].instr,
        Instruction::Cmd(Command::Shell("-c 'print(2)'".into()))
    );
}

fn parse_err(df: &str) -> String {
    parse(df).unwrap_err().message
}

#[test]
fn unsupported_instructions_name_line_and_instruction() {
    let m = parse_err("FROM base\nRUN true\nEXPOSE 80\n");
    assert!(
        m.contains("line 3") && m.contains("EXPOSE") && m.contains("not supported"),
        "{m}"
    );
    let m = parse_err("FROM base\nhealthcheck CMD true\n");
    assert!(m.contains("line 2") && m.contains("HEALTHCHECK"), "{m}");
}

#[test]
fn bad_dockerfiles_are_refused_with_the_reason() {
    for (df, needle) in [
        ("", "no FROM"),
        ("# only a comment\n", "no FROM"),
        ("RUN true\nFROM base\n", "comes before FROM"),
        ("FROM a\nFROM b\n", "multi-stage"),
        ("FROM a AS build\n", "named stages"),
        ("FROM a\nCOPY --from=build /x /y\n", "--from"),
        ("FROM a\nCOPY --chmod=755 x /y\n", "--chmod"),
        ("FROM a\nCOPY onlyone\n", "source and a destination"),
        (
            "FROM a\nADD https://example.com/x.tar.gz /opt/\n",
            "only local files",
        ),
        ("FROM a\nADD git@host:repo.git /src\n", "only local files"),
        ("FROM a\nENV 1BAD=x\n", "not a variable name"),
        ("FROM a\nENV ONLYKEY\n", "has no value"),
        ("FROM a\nENV A=\"unterminated\n", "unterminated quote"),
        ("FROM a\nRUN\n", "needs arguments"),
        ("FROM a\nARG A B\n", "one NAME"),
    ] {
        let m = parse_err(df);
        assert!(m.contains(needle), "{df:?}: {m}");
        assert!(m.starts_with("Dockerfile"), "{m}");
    }
}

#[test]
fn shell_form_starting_with_a_bracket_stays_shell() {
    let s = parse("FROM a\nRUN [ -f /etc/os-release ] && echo yes\n").unwrap();
    assert!(matches!(&s[1].instr, Instruction::Run(Command::Shell(c)) if c.starts_with("[ -f")));
}

#[test]
fn expand_handles_forms_defaults_and_escapes() {
    let vars = |n: &str| match n {
        "A" => Some("x".to_string()),
        "EMPTY" => Some(String::new()),
        _ => None,
    };
    assert_eq!(
        expand("$A/${A}/${NONE:-d}/${EMPTY:-e}", &vars).unwrap(),
        "x/x/d/e"
    );
    assert_eq!(expand("${A:+alt}${NONE:+alt}", &vars).unwrap(), "alt");
    assert_eq!(expand("\\$A costs $$", &vars).unwrap(), "$A costs $$");
    assert!(expand("${A", &vars).is_err());
}
