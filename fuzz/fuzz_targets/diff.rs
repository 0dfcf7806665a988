//! Fuzz target `diff`: bytes → a random program (tests/random_program, shared with
//! tests/differential.rs) run on "jit" and "interp"; a disagreement beyond the documented bounds,
//! or a program only one backend runs, panics with the program's IR text and inputs.

#![no_main]

#[path = "../../tests/random_program/mod.rs"]
mod random_program;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = random_program::check(data) {
        panic!("jit and interp disagree: {e}");
    }
});
