//! Differential property test: random programs (tests/random_program: elementwise unary and
//! binary ops, compares and selects, reshapes, transposes, broadcasts, reductions and dots on
//! small f32, f64 and i32 shapes) run on "jit" and on the reference "interp", outputs compared
//! exactly or within the documented bounds (see the module doc of `random_program`). The same
//! generator drives the `diff` fuzz target (fuzz/README.md). `PROPTEST_CASES` sets the count.

mod random_program;

use std::cell::Cell;

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use random_program::{Outcome, check};

/// The random cases: `PROPTEST_CASES` byte strings (64 by default), each built into a program
/// and compared on both backends. Prints how many programs were compared and how many skipped
/// (the builder rejected the bytes, or both backends failed alike), and fails if fewer than
/// half were compared, so a generator that degenerates into skips cannot pass silently.
#[test]
fn jit_matches_interp_on_random_programs() {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(64);
    let mut runner = TestRunner::new(ProptestConfig::with_cases(cases));
    let compared = Cell::new(0u64);
    let skipped = Cell::new(0u64);
    let result = runner.run(&prop::collection::vec(any::<u8>(), 0..160), |bytes| {
        match check(&bytes).map_err(TestCaseError::fail)? {
            Outcome::Compared => compared.set(compared.get() + 1),
            Outcome::Skipped => skipped.set(skipped.get() + 1),
        }
        Ok(())
    });
    let (compared, skipped) = (compared.get(), skipped.get());
    println!("differential: {cases} cases: {compared} programs compared, {skipped} skipped");
    if let Err(e) = result {
        panic!("{e}");
    }
    assert_eq!(compared + skipped, u64::from(cases), "every case is counted once");
    assert!(compared * 2 >= u64::from(cases), "only {compared} of {cases} programs compared");
}

/// Fixed byte strings, so every run covers each dtype and the tails whatever the random cases
/// drew: each must build, run on both backends and agree.
#[test]
fn fixed_programs_are_compared() {
    // byte 0: dtype (f32, f64, i32); byte 1: rank 2; bytes 2-3: dims [3, 4]; byte 4: 8 steps.
    for dtype in 0..3u8 {
        for tail in 0..4u8 {
            let mut bytes = vec![dtype, 2, 1, 3, 7];
            for step in 0..8u8 {
                bytes.extend([step, step + 1, step, step * 3 + 1]);
            }
            // Three outputs, each with the tail under test.
            bytes.extend([2, 5, tail, 1, 9, tail, 2, 10, tail, 3]);
            assert_eq!(check(&bytes), Ok(Outcome::Compared), "dtype byte {dtype}, tail {tail}");
        }
    }
}
