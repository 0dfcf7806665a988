//! docs/ops.md must mention every op type of `ALL_OP_TYPES`, so the op reference cannot fall behind the code.

use tensorjit::ir::optype::{ALL_OP_TYPES, OpType};

/// True when `name` occurs in `text` as a whole word (not as part of a longer identifier, so
/// `Dot` is not satisfied by `DotGeneral`).
fn mentions(text: &str, name: &str) -> bool {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(name).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + name.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

#[test]
fn ops_doc_mentions_every_op_type() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/ops.md");
    let text = std::fs::read_to_string(path).expect("read docs/ops.md");
    // `Display` prints the CamelCase variant name (e.g. `DotGeneral`); `name()` is the snake_case mnemonic.
    assert_eq!(OpType::DotGeneral.to_string(), "DotGeneral");
    let missing: Vec<String> =
        ALL_OP_TYPES.iter().map(|t| t.to_string()).filter(|name| !mentions(&text, name)).collect();
    assert!(missing.is_empty(), "docs/ops.md does not mention these op types: {missing:?}");
}
