#!/usr/bin/env python3
"""Runs a WASI (wasm32-wasip1) program under wasmtime and exits with its exit code.

Usage: tools/wasm-run.py PROGRAM.wasm [ARGS...]

The cargo runner of the wasm32-wasip1 target (docs/portable.md):
    CARGO_TARGET_WASM32_WASIP1_RUNNER=tools/wasm-run.py cargo test --target wasm32-wasip1 ...
The program gets ARGS, the environment of this process, stdin/stdout/stderr, and the current
directory preopened as "." (plus every directory in WASM_RUN_DIRS, ':'-separated, under its own
path). Needs the wasmtime Python package (`pip install wasmtime`): exit code 3 without it.
"""
import os
import sys


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import wasmtime
    except ImportError:
        print("wasm-run: the wasmtime Python package is missing (pip install wasmtime)", file=sys.stderr)
        return 3
    program = sys.argv[1]
    config = wasmtime.Config()
    engine = wasmtime.Engine(config)
    store = wasmtime.Store(engine)
    wasi = wasmtime.WasiConfig()
    wasi.argv = [os.path.basename(program)] + sys.argv[2:]
    wasi.env = list(os.environ.items())
    wasi.inherit_stdin()
    wasi.inherit_stdout()
    wasi.inherit_stderr()
    wasi.preopen_dir(".", ".")
    for d in filter(None, os.environ.get("WASM_RUN_DIRS", "").split(":")):
        wasi.preopen_dir(d, d)
    store.set_wasi(wasi)
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    module = wasmtime.Module.from_file(engine, program)
    instance = linker.instantiate(store, module)
    start = instance.exports(store)["_start"]
    try:
        start(store)
    except wasmtime.ExitTrap as e:
        return e.code
    except wasmtime.Trap as e:
        # A panic under panic=abort ends in an `unreachable` trap.
        print(f"wasm-run: trap: {e}", file=sys.stderr)
        return 134
    return 0


if __name__ == "__main__":
    sys.exit(main())
