//! What runs in a pane's terminal, as `pane.process_info` reports it: the pane's shell and the
//! jobs started from its prompt, the last one in front.
//!
//! Why it exists: a gateway must not type a brief while a shell at its prompt has the terminal
//! (SPEC [C-20]); it asks `pane.process_info`. Real herdr v0.8.2 answers with every process of the
//! terminal's foreground group and their real `argv` (`fixtures/herdr-0.8.2/process_info.jsonl`):
//! - the pane's shell at its prompt: `foreground_process_group_id == shell_pid`, one process
//!   named `bash` with `argv ["/bin/bash"]`;
//! - a program started from the prompt (`sleep 1000`): its own group (pid ≠ `shell_pid`), `argv`
//!   as typed (`["sleep","1000"]`), no `argv0` member;
//! - `exec sleep 1000`: the pane's process *is* the program (`shell_pid == group`, name `sleep`);
//! - a nested interactive `bash`: a group of its own, name `bash`, `argv ["bash"]` — a shell at
//!   its prompt again, so what is typed next is run by it;
//! - `bash script.sh`: the leader named `bash` with the script in its `argv` (plus whatever the
//!   script runs: [`FakeHerdr::run_job`](super::FakeHerdr::run_job) shows such a group).
//!
//! A command line the shell runs starts a job that keeps the terminal until it exits (ctrl+c,
//! [`FakeHerdr::exit_program`](super::FakeHerdr::exit_program)), except shell builtins such as
//! `echo` or `cd`, which finish at once. The fake cannot know which commands exist: an unknown
//! word (`hello`) is taken for a program that keeps running.

/// The pane's shell as real herdr's panes run it (`SHELL=/bin/bash`): its `argv`.
pub const SHELL_PATH: &str = "/bin/bash";

/// Program names that are shells: such a program with no script in its `argv` is a prompt.
pub const SHELLS: &[&str] = &[
    "bash", "zsh", "sh", "dash", "fish", "ksh", "mksh", "tcsh", "csh", "nu", "elvish", "xonsh",
];

/// Shell builtins (and `exit`, handled apart) that finish at once: no job is left in front.
const BUILTINS: &[&str] = &[
    "echo", "printf", "cd", "export", "unset", "set", "true", "false", ":", "test", "[", "pwd", "alias", "unalias",
    "history", "type", "hash", "umask", "wait", "kill", "jobs", "read", "let", "declare", "local", "shopt", "clear",
    "source", ".",
];

/// Programs that finish at once when given arguments (`touch <file>`, `ls <dir>`): no job is left
/// in front, as with a builtin. Without arguments they are taken for programs that keep running
/// (the fake cannot tell `cat` reading its terminal from `cat <file>` otherwise).
const QUICK: &[&str] = &[
    "touch", "mkdir", "rm", "rmdir", "ls", "cp", "mv", "ln", "chmod", "chown", "cat", "head", "tail", "wc", "grep",
    "date", "stat", "basename", "dirname",
];

/// One process of a foreground group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Proc {
    pub(super) pid: u32,
    pub(super) name: String,
    pub(super) argv: Vec<String>,
}

impl Proc {
    pub(super) fn new(pid: u32, argv: &[String]) -> Proc {
        Proc {
            pid,
            name: argv.first().map(|a| program_name(a)).unwrap_or_default(),
            argv: argv.to_vec(),
        }
    }

    pub(super) fn cmdline(&self) -> String {
        self.argv.join(" ")
    }
}

/// A job started from a prompt: a process group, its leader first. `exec` replaced the shell
/// that ran it (the leader's pid is that shell's). `agent` marks the pane's agent process.
/// `ignores_input`: the job never reads its terminal (`bash sleeper.sh` running `sleep 1000`):
/// lines submitted while it is in front wait in the terminal's input queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Job {
    pub(super) procs: Vec<Proc>,
    pub(super) exec: bool,
    pub(super) agent: bool,
    pub(super) ignores_input: bool,
}

impl Job {
    pub(super) fn leader(&self) -> Option<&Proc> {
        self.procs.first()
    }

    pub(super) fn pgid(&self) -> u32 {
        self.leader().map_or(0, |p| p.pid)
    }

    pub(super) fn name(&self) -> &str {
        self.leader().map_or("", |p| p.name.as_str())
    }

    /// An interactive shell: a shell whose `argv` names no script (only options, if anything).
    pub(super) fn is_prompt(&self) -> bool {
        self.leader().is_some_and(|p| {
            SHELLS.contains(&p.name.trim_start_matches('-')) && p.argv.iter().skip(1).all(|a| a.starts_with('-'))
        })
    }
}

/// What a shell does with a submitted command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Command {
    /// Nothing stays in front: an empty line, a builtin (`echo …`), or a syntax the fake ignores.
    Finishes,
    /// `exit`: the shell at the prompt ends.
    Exit,
    /// A program takes the terminal in a group of its own.
    Run(Vec<String>),
    /// `exec PROGRAM …`: the program replaces the shell.
    Exec(Vec<String>),
}

/// Reads a command line the way the fake's shell runs it: words split on whitespace, leading
/// `NAME=value` assignments skipped; `exec` replaces the shell; builtins, and quick programs given
/// arguments ([`QUICK`]), finish at once.
pub(super) fn parse_command_line(line: &str) -> Command {
    let words: Vec<String> = line
        .split_whitespace()
        .skip_while(|w| is_assignment(w))
        .map(str::to_string)
        .collect();
    let Some(first) = words.first() else {
        return Command::Finishes;
    };
    match first.as_str() {
        "exit" | "logout" => Command::Exit,
        "exec" if words.len() > 1 => Command::Exec(words[1..].to_vec()),
        "exec" => Command::Finishes,
        w if BUILTINS.contains(&w) => Command::Finishes,
        w if QUICK.contains(&program_name(w).as_str()) && words.len() > 1 => Command::Finishes,
        _ => Command::Run(words),
    }
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=')
        .is_some_and(|(name, _)| !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

/// The `argv` the kernel runs for a typed command whose first word is a path to a script
/// (`#!/bin/bash` on its first line): the interpreter first, then the script and its arguments
/// (real herdr v0.8.2, 2026-12-06: `argv ["/bin/bash", "<dir>/claude", "40"]`, listed by the
/// script's name). `None` for anything else (a program, a missing or unreadable file).
pub(super) fn script_argv(argv: &[String]) -> Option<Vec<String>> {
    use std::io::{BufRead, Read};
    let path = argv.first().filter(|a| a.contains('/'))?;
    let file = std::fs::File::open(path).ok()?;
    let mut first = String::new();
    std::io::BufReader::new(file.take(256)).read_line(&mut first).ok()?;
    let interpreter = first.strip_prefix("#!")?.split_whitespace().next()?;
    Some(
        std::iter::once(interpreter.to_string())
            .chain(argv.iter().cloned())
            .collect(),
    )
}

/// The process name the kernel shows for `argv[0]`: its last path component.
pub(super) fn program_name(argv0: &str) -> String {
    argv0.rsplit('/').next().unwrap_or(argv0).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn command_lines_are_read_as_a_shell_runs_them() {
        assert_eq!(parse_command_line("sleep 1000"), Command::Run(argv(&["sleep", "1000"])));
        assert_eq!(
            parse_command_line("FOO=1 claude --x"),
            Command::Run(argv(&["claude", "--x"]))
        );
        assert_eq!(
            parse_command_line("exec sleep 1000"),
            Command::Exec(argv(&["sleep", "1000"]))
        );
        assert_eq!(parse_command_line("echo HAZARD_RAN_$((6*7))"), Command::Finishes);
        assert_eq!(parse_command_line("   "), Command::Finishes);
        assert_eq!(parse_command_line("exit"), Command::Exit);
    }

    #[test]
    fn a_shell_without_a_script_is_a_prompt() {
        let job = |words: &[&str]| Job {
            procs: vec![Proc::new(1, &argv(words))],
            exec: false,
            agent: false,
            ignores_input: false,
        };
        assert!(job(&["bash"]).is_prompt());
        assert!(job(&["/bin/zsh", "-l"]).is_prompt());
        assert!(!job(&["bash", "script.sh"]).is_prompt());
        assert!(!job(&["sleep", "1000"]).is_prompt());
        assert_eq!(job(&["/usr/bin/python3", "x.py"]).name(), "python3");
    }
}
