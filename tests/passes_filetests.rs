//! Filetests for the optimisation passes: each tests/filetests/passes/NAME.tjir starts with a
//! `; passes: p1 p2 …` line; the module is parsed, the passes run in that order (verifying after
//! each), and the printed result must equal NAME.expected. `TENSORJIT_BLESS=1` rewrites the
//! expected files (review the diff before committing them).

use std::path::Path;

use tensorjit::ir::text::{parse_module, print_module};
use tensorjit::passes::{self, PassCtx};

fn run_file(path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let header = text.lines().next().unwrap_or_default();
    let names: Vec<&str> = header
        .strip_prefix("; passes:")
        .ok_or_else(|| format!("{}: first line must be `; passes: …`", path.display()))?
        .split_whitespace()
        .collect();
    let mut m = parse_module(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    tensorjit::ir::verify::verify(&m).map_err(|e| format!("{}: input does not verify: {e}", path.display()))?;
    let mut ctx = PassCtx { verify: true, ..PassCtx::default() };
    for name in names {
        if name == "pipeline" {
            passes::optimize(&mut m, &mut ctx).map_err(|e| format!("{}: {e}", path.display()))?;
            continue;
        }
        let (_, pass) = passes::PIPELINE
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| format!("{}: unknown pass {name}", path.display()))?;
        passes::run_pass(&mut m, &mut ctx, name, *pass).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let got = print_module(&m);
    let expected_path = path.with_extension("expected");
    if std::env::var("TENSORJIT_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&expected_path, &got).map_err(|e| e.to_string())?;
        return Ok(());
    }
    let want = std::fs::read_to_string(&expected_path)
        .map_err(|e| format!("{}: {e} (run with TENSORJIT_BLESS=1 to create it)", expected_path.display()))?;
    if got != want {
        return Err(format!("{}: output differs\n--- expected\n{want}\n--- got\n{got}", path.display()));
    }
    Ok(())
}

#[test]
fn pass_filetests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests/passes");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("filetests dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "tjir"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    let failures: Vec<String> = files.iter().filter_map(|f| run_file(f).err()).collect();
    assert!(failures.is_empty(), "{} of {} filetests failed:\n{}", failures.len(), files.len(), failures.join("\n\n"));
}
