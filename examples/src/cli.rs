//! What every example's command line shares: the error that ends a run, how it is reported, and
//! reading flags one at a time with errors that end with the usage text.

use std::fmt::Display;
use std::future::Future;
use std::process::ExitCode;

/// A problem that stops a run (exit status 2), with what to tell the user.
pub struct Fatal(pub String);

impl<E: Display> From<E> for Fatal {
    fn from(error: E) -> Self {
        Fatal(error.to_string())
    }
}

/// A failure described by `message`.
pub fn fatal(message: impl Into<String>) -> Fatal {
    Fatal(message.into())
}

/// Runs an example's `run`: its exit code, or exit status 2 after `name: error: …` on stderr.
pub async fn exit_code(name: &str, run: impl Future<Output = Result<ExitCode, Fatal>>) -> ExitCode {
    match run.await {
        Ok(code) => code,
        Err(Fatal(message)) => {
            eprintln!("{name}: error: {message}");
            ExitCode::from(2)
        }
    }
}

/// The command line, read one flag at a time.
pub struct Flags<I> {
    args: I,
    usage: &'static str,
}

impl<I: Iterator<Item = String>> Flags<I> {
    /// The flags in `args` (the program name left out), for a program whose usage is `usage`.
    pub fn new(args: I, usage: &'static str) -> Self {
        Flags { args, usage }
    }

    /// The next flag, `None` at the end.
    pub fn next_flag(&mut self) -> Option<String> {
        self.args.next()
    }

    /// The value that follows `flag`.
    pub fn value(&mut self, flag: &str) -> Result<String, Fatal> {
        self.args
            .next()
            .ok_or_else(|| self.error(&format!("{flag} needs a value")))
    }

    /// The positive number that follows `flag`.
    pub fn number(&mut self, flag: &str) -> Result<usize, Fatal> {
        let text = self.value(flag)?;
        text.parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| self.error(&format!("{flag} takes a positive number, not {text:?}")))
    }

    /// The comma-separated list that follows `flag`, each item one of `allowed`.
    pub fn list(&mut self, flag: &str, allowed: &[&str]) -> Result<Vec<String>, Fatal> {
        let items: Vec<String> = self
            .value(flag)?
            .split(',')
            .map(|item| item.trim().to_owned())
            .collect();
        match items.iter().find(|item| !allowed.contains(&item.as_str())) {
            Some(bad) => Err(self.error(&format!(
                "{flag}: no {bad:?}; one of {}",
                allowed.join(", ")
            ))),
            None => Ok(items),
        }
    }

    /// The error for a flag the program does not take.
    pub fn unexpected(&self, flag: &str) -> Fatal {
        self.error(&format!("unexpected argument {flag:?}"))
    }

    /// An error in the command line: `message`, then the usage.
    pub fn error(&self, message: &str) -> Fatal {
        Fatal(format!("{message}\n\n{}", self.usage))
    }
}
