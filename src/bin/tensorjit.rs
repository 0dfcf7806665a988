//! `tensorjit`: the command-line tool. Subcommands check and reformat IR text files (`.tjir`).
//!
//! Each subcommand is one function taking its own arguments and returning the exit code; to add a
//! subcommand, add a `match` arm in [`dispatch`] and a line to [`USAGE`].

use std::process::ExitCode;

use tensorjit::Error;
use tensorjit::ir::Module;
use tensorjit::ir::text::{PrintOptions, SourceMap, parse_module_with_locations, print_module_with};
use tensorjit::ir::verify::verify_diagnostics;

const USAGE: &str = "\
usage: tensorjit <command> [arguments]

commands:
  check FILE        parse and verify an IR text file; prints every error with its line
  fmt [--max-constant-elements N] FILE
                    print the canonical form of an IR text file (elided constants do not parse)
  run FILE.tjir --input NAME=PATH.npy ... --out DIR [--backend NAME] [--repeat N]
                    execute main on .npy inputs, write DIR/out0.npy, ... (see `run --help`)
  help              show this message

FILE may be `-` for standard input.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    ExitCode::from(dispatch(&args))
}

/// Runs the subcommand named by `args[0]`; returns the process exit code (0 ok, 1 failure,
/// 2 usage error).
fn dispatch(args: &[String]) -> u8 {
    let Some(cmd) = args.first() else {
        eprintln!("{USAGE}");
        return 2;
    };
    let rest = &args[1..];
    match cmd.as_str() {
        "check" => cmd_check(rest),
        "fmt" => cmd_fmt(rest),
        "help" | "-h" | "--help" => {
            println!("{USAGE}");
            0
        }
        "run" => match tensorjit::cli::run_command(rest) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("error: {e}");
                1
            }
        },
        other => {
            eprintln!("tensorjit: unknown command `{other}`\n\n{USAGE}");
            2
        }
    }
}

/// Reads `path` (`-` = standard input) in bounded chunks: a NUL byte, invalid UTF-8 or more
/// than `limits::MAX_INPUT_FILE_BYTES` bytes is an error naming the file.
fn read_input(path: &str) -> Result<String, String> {
    tensorjit::cli::read_text_file(std::path::Path::new(path)).map_err(|e| e.to_string())
}

/// Reads and parses `path`; on failure prints the error (with its position) and returns `None`.
fn load(path: &str) -> Option<(Module, SourceMap)> {
    let text = match read_input(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return None;
        }
    };
    match parse_module_with_locations(&text) {
        Ok(r) => Some(r),
        Err(Error::Parse { line, column, msg }) => {
            eprintln!("{path}:{line}:{column}: error: {msg}");
            None
        }
        Err(e) => {
            eprintln!("{path}: error: {e}");
            None
        }
    }
}

/// One positional FILE argument.
fn single_file<'a>(cmd: &str, args: &'a [String]) -> Result<&'a str, u8> {
    match args {
        [f] => Ok(f),
        _ => {
            eprintln!("tensorjit {cmd}: expected exactly one FILE argument\n\n{USAGE}");
            Err(2)
        }
    }
}

/// `tensorjit check FILE`: parse + verify.
fn cmd_check(args: &[String]) -> u8 {
    let path = match single_file("check", args) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let Some((m, map)) = load(path) else { return 1 };
    let diags = verify_diagnostics(&m);
    if diags.is_empty() {
        println!(
            "ok: module @{}, {} functions, {} nodes, {} values",
            m.name,
            m.functions.len(),
            m.nodes.len(),
            m.values.len()
        );
        return 0;
    }
    for d in &diags {
        let line = d.node.and_then(|n| map.node_line(n)).or_else(|| d.func.and_then(|f| map.func_line(f)));
        match line {
            Some(l) => eprintln!("{path}:{l}: error: {}", d.message),
            None => eprintln!("{path}: error: {}", d.message),
        }
    }
    eprintln!("{path}: {} verification error(s)", diags.len());
    1
}

/// `tensorjit fmt [--max-constant-elements N] FILE`: print the canonical text.
fn cmd_fmt(args: &[String]) -> u8 {
    let mut opts = PrintOptions::default();
    let mut files = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--max-constant-elements" {
            match it.next().and_then(|n| n.parse::<usize>().ok()) {
                Some(n) => opts.max_constant_elements = Some(n),
                None => {
                    eprintln!("tensorjit fmt: --max-constant-elements needs a non-negative integer");
                    return 2;
                }
            }
        } else {
            files.push(a.clone());
        }
    }
    let path = match single_file("fmt", &files) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let Some((m, _)) = load(path) else { return 1 };
    print!("{}", print_module_with(&m, &opts));
    0
}
