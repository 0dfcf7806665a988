//! Fuzz target `parse`: IR text → `parse_module` → `verify` → print → re-parse → print again,
//! which must give the same text. Any panic, abort or hang in the parser, verifier or printer
//! is a finding; so is a verified module whose printed text does not re-parse to itself.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorjit::ir::text::{parse_module, print_module};
use tensorjit::ir::verify::verify;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(module) = parse_module(text) else { return };
    if verify(&module).is_err() {
        return;
    }
    let printed = print_module(&module);
    let again = match parse_module(&printed) {
        Ok(m) => m,
        Err(e) => panic!("the printed text of a verified module does not parse: {e}\n{printed}"),
    };
    if let Err(e) = verify(&again) {
        panic!("the re-parsed module does not verify: {e}\n{printed}");
    }
    let reprinted = print_module(&again);
    assert_eq!(printed, reprinted, "print → parse → print changed the text");
});
