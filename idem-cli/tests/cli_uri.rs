//! Where the `idem` command finds its connection string (`--uri`, then `DATABASE_URL`, then
//! `MONGODB_URI`, then `POSTGRES_URI`, then `MYSQL_URI`), and that no password it holds is ever printed, in any
//! form the drivers accept, even when the server refuses the connection.

use std::process::{Command, Output};

/// A password no message may show.
const SECRET: &str = "s3cr3t-Pa55word";

/// `idem audit` of table `posts` with `args`, and the environment variables `env` (every
/// connection-string variable removed first).
fn audit(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_idem"));
    command
        .args(["audit", "--table", "posts", "--key", "slug"])
        .args(args);
    for name in ["DATABASE_URL", "MONGODB_URI", "POSTGRES_URI", "MYSQL_URI"] {
        command.env_remove(name);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

fn all_output(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Every form the drivers accept a password in, each pointed at a closed port (or refused before
/// a connection): the command fails, says where, and never shows the password.
#[test]
fn no_password_is_printed_in_any_form_of_connection_string() {
    let encoded = "s3cr3t%2DPa55word";
    let forms = [
        format!("postgres://me:{SECRET}@127.0.0.1:1/blog"),
        format!("postgresql://me:{encoded}@127.0.0.1:1/blog"),
        format!("postgres://me@127.0.0.1:1/blog?password={SECRET}"),
        format!("postgresql://127.0.0.1:1/blog?user=me&password={SECRET}&connect_timeout=2"),
        format!("postgres://me:{SECRET}@127.0.0.1:notaport/blog"),
        format!("host=127.0.0.1 port=1 user=me password={SECRET} dbname=blog"),
        format!("host=127.0.0.1 port=1 password = '{SECRET} x' dbname=blog"),
        format!("host=127.0.0.1 port=notaport password={SECRET}"),
        format!("mongodb://me:{SECRET}@127.0.0.1:1/?serverSelectionTimeoutMS=500"),
        format!("mongodb://me:{SECRET}@127.0.0.1:1/?authMechanism=NOSUCH"),
        format!(
            "mongodb://127.0.0.1:1/?authMechanism=MONGODB-AWS&authMechanismProperties=\
             AWS_SESSION_TOKEN:{SECRET}&serverSelectionTimeoutMS=500"
        ),
        format!("mongodb+srv://me:{SECRET}@no-such-host.invalid/?serverSelectionTimeoutMS=500"),
        // No path, and an `@` in the query: the user information is not taken to end there.
        format!("postgres://me@127.0.0.1?password={SECRET}&application_name=a@b&connect_timeout=2"),
        // A `/` in a password left unencoded: the user information ends at the last `@`.
        format!("postgres://me:ab/{SECRET}@127.0.0.1:1/blog"),
        format!("mongodb://me:ab/{SECRET}@127.0.0.1:1/?serverSelectionTimeoutMS=500"),
        // A `?` left unencoded in the password: tokio-postgres reads up to the first `@`.
        format!("postgres://me:ab?{SECRET}@127.0.0.1:1/blog"),
        format!("mongodb://me:ab?{SECRET}@127.0.0.1:1/?serverSelectionTimeoutMS=500"),
        // A parameter's name percent-encoded, which tokio-postgres decodes.
        format!("postgres://127.0.0.1:1/blog?pass%77ord={SECRET}"),
        // A backslash escaping a space in an unquoted key=value password.
        format!("host=127.0.0.1 port=1 user=me password=x\\ {SECRET} dbname=blog"),
        // `://` in a key=value string's values.
        format!("host=127.0.0.1 port=1 password={SECRET} application_name=http://x"),
        format!("host=127.0.0.1 port=1 password=ab://{SECRET}"),
        // No scheme at all: no driver reads it, and it is not echoed.
        format!("me:{SECRET}@127.0.0.1:1/blog"),
        // MariaDB's (sqlx's MySQL driver reads the user information up to the last `@` before
        // the first `/`, `?` or `#`).
        format!("mysql://me:{SECRET}@127.0.0.1:1/blog"),
        format!("mariadb://me:{encoded}@127.0.0.1:1/blog"),
        format!("mysql://me:ab/{SECRET}@127.0.0.1:1/blog"),
        format!("mysql://me:ab?{SECRET}@127.0.0.1:1/blog"),
        format!("mysql://me:ab@{SECRET}@127.0.0.1:1/blog"),
        // An `@` in the database's name, after the user information.
        format!("postgres://me:{SECRET}@127.0.0.1:1/team@prod?connect_timeout=2"),
    ];
    for uri in &forms {
        let given = audit(&["--uri", uri, "--database", "blog"], &[]);
        let shown = all_output(&given);
        assert_eq!(given.status.code(), Some(2), "{uri}: {shown}");
        assert!(shown.starts_with("idem: "), "{uri}: {shown}");
        assert!(
            !shown.contains(SECRET) && !shown.contains("s3cr3t"),
            "{uri}: the password is shown: {shown}"
        );
        // The same through the environment.
        let from_env = audit(&["--database", "blog"], &[("DATABASE_URL", uri)]);
        let shown = all_output(&from_env);
        assert_eq!(from_env.status.code(), Some(2), "{uri}: {shown}");
        assert!(!shown.contains("s3cr3t"), "{uri}: {shown}");
    }
    // What is left is enough to tell which server was meant.
    let shown = all_output(&audit(&["--uri", &forms[2], "--database", "blog"], &[]));
    assert!(
        shown.contains("postgres://me@127.0.0.1:1/blog?password=***"),
        "{shown}"
    );
    let last = forms.last().expect("forms");
    let shown = all_output(&audit(&["--uri", last], &[]));
    assert!(
        shown.contains("postgres://me:***@127.0.0.1:1/team@prod?connect_timeout=2"),
        "{shown}"
    );
}

/// A MariaDB server that cannot be reached is an error naming it by its connection string,
/// `mysql://` or `mariadb://`, its password masked.
#[test]
fn a_mariadb_server_out_of_reach_is_named_without_its_password() {
    for scheme in ["mysql", "mariadb"] {
        let uri = format!("{scheme}://me:{SECRET}@127.0.0.1:1/blog");
        let given = audit(&["--uri", &uri], &[]);
        let shown = all_output(&given);
        assert_eq!(given.status.code(), Some(2), "{shown}");
        assert!(
            shown.contains(&format!(
                "cannot connect to MariaDB at {scheme}://me:***@127.0.0.1:1/blog"
            )),
            "{shown}"
        );
        assert!(!shown.contains("s3cr3t"), "{shown}");
    }
}

/// `--uri` first, then `DATABASE_URL`, then `MONGODB_URI`, then `POSTGRES_URI`; none at all is
/// an error naming them.
#[test]
fn the_connection_string_comes_from_the_flag_then_database_url_then_each_stores_variable() {
    let directory = std::env::temp_dir().join("idem-tests");
    std::fs::create_dir_all(&directory).unwrap();
    let missing = |name: &str| {
        format!(
            "sqlite:{}",
            directory
                .join(format!("uri_{name}_{}.db", std::process::id()))
                .display()
        )
    };
    let (flag, database_url, mongodb, postgres) = (
        missing("flag"),
        missing("database_url"),
        missing("mongodb"),
        missing("postgres"),
    );
    // Each SQLite file is missing, and the error names the one used.
    let used = |output: Output| all_output(&output);
    let every = [
        ("DATABASE_URL", database_url.as_str()),
        ("MONGODB_URI", mongodb.as_str()),
        ("POSTGRES_URI", postgres.as_str()),
    ];
    let shown = used(audit(&["--uri", &flag], &every));
    assert!(shown.contains("uri_flag_"), "{shown}");
    let shown = used(audit(&[], &every));
    assert!(shown.contains("uri_database_url_"), "{shown}");
    let shown = used(audit(&[], &every[1..]));
    assert!(shown.contains("uri_mongodb_"), "{shown}");
    let shown = used(audit(&[], &every[2..]));
    assert!(shown.contains("uri_postgres_"), "{shown}");
    let none = audit(&[], &[]);
    assert_eq!(none.status.code(), Some(2));
    let shown = all_output(&none);
    assert!(
        shown.contains("give --uri, or set DATABASE_URL, MONGODB_URI, POSTGRES_URI, MYSQL_URI"),
        "{shown}"
    );
}

/// `--uri`'s help names every kind of connection string and the environment variables.
#[test]
fn the_help_names_every_store_and_variable() {
    let help = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["audit", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    for word in [
        "mongodb://",
        "postgres://",
        "sqlite:PATH",
        "DATABASE_URL",
        "POSTGRES_URI",
    ] {
        assert!(text.contains(word), "{word}: {text}");
    }
}
