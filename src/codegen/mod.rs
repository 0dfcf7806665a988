//! The Cranelift JIT: compiles [`LoopKernel`]s to native code, once per distinct kernel per process
//! (the cache is keyed by the kernel's full structure: types, accesses, instructions, outputs).
//!
//! The ISA is built from host detection (`cranelift-native`), so FMA and AVX encodings are used.
//! Compiled kernels live in one process-wide `JITModule` that is never freed, which is what makes
//! the function pointers handed out valid for the life of the process.

mod emit;
pub mod loop_kernel;
pub mod math;
mod stream;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cranelift_codegen::Context;
use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module, ModuleReloc};

use crate::error::{Error, Result};

// The paths the crate's own tests use (feature `internals`).
#[cfg_attr(not(feature = "internals"), allow(unused_imports))]
pub use emit::{supports, supports_typed};
#[cfg_attr(not(feature = "internals"), allow(unused_imports))]
pub use loop_kernel::{Access, ElemTy, Inst, Lit, LoopKernel, Reduction, Ty};

type KernelFn = unsafe extern "C" fn(args: *const *mut u8, start: usize, end: usize);

/// A compiled loop kernel: call [`CompiledLoop::run`] with input and output pointers.
#[derive(Clone)]
pub struct CompiledLoop {
    f: KernelFn,
    /// Cranelift IR of the kernel (for dumps).
    pub clif: Arc<String>,
    /// Disassembly of the machine code (for dumps).
    pub disasm: Arc<String>,
}

impl std::fmt::Debug for CompiledLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CompiledLoop({:p})", self.f as *const u8)
    }
}

impl CompiledLoop {
    /// Runs the kernel over element indices `start..end`.
    ///
    /// # Safety
    /// `args` must hold one pointer per kernel input followed by one per output; every `Full`
    /// input and every output must be valid for `end` elements of its own element type
    /// (reads for inputs, writes for outputs), `Scalar` inputs for one element, `Strided` inputs
    /// for every offset `Σ idx[k]·strides[k]` of their view, and outputs must not overlap inputs
    /// other than element-for-element (in-place, same element size) and not each other.
    pub unsafe fn run(&self, args: &[*mut u8], start: usize, end: usize) {
        // SAFETY: the caller guarantees the pointer contract documented above, which is the
        // contract the generated code relies on; the code itself stays alive in the global module.
        unsafe { (self.f)(args.as_ptr(), start, end) }
    }
}

struct JitState {
    module: JITModule,
    ctx: Context,
    fctx: FunctionBuilderContext,
    cache: HashMap<String, CompiledLoop>,
    /// Streaming-store variants by kernel key; `None` where the kernel has none.
    stream_cache: HashMap<String, Option<CompiledLoop>>,
    counter: usize,
}

// SAFETY: `JITModule` holds raw pointers to the code and data memory it owns; it is only ever
// accessed under the global mutex below, never from two threads at once.
unsafe impl Send for JitState {}

fn state() -> Result<&'static Mutex<JitState>> {
    static STATE: OnceLock<std::result::Result<Mutex<JitState>, String>> = OnceLock::new();
    STATE
        .get_or_init(|| {
            let mut flags = settings::builder();
            flags.set("opt_level", "speed").map_err(|e| e.to_string())?;
            flags.set("is_pic", "false").map_err(|e| e.to_string())?;
            let isa_builder = cranelift_native::builder()?;
            let isa = isa_builder.finish(settings::Flags::new(flags)).map_err(|e| e.to_string())?;
            let module = JITModule::new(JITBuilder::with_isa(isa, cranelift_module::default_libcall_names()));
            let ctx = module.make_context();
            Ok(Mutex::new(JitState {
                module,
                ctx,
                fctx: FunctionBuilderContext::new(),
                cache: HashMap::new(),
                stream_cache: HashMap::new(),
                counter: 0,
            }))
        })
        .as_ref()
        .map_err(|e| Error::not_implemented("jit", format!("cannot create the Cranelift JIT for this host: {e}")))
}

/// Name of the host ISA the JIT compiles for, with its enabled features.
pub fn host_isa_description() -> String {
    match state() {
        Ok(s) => {
            let st = s.lock().unwrap_or_else(|e| e.into_inner());
            let isa = st.module.isa();
            format!(
                "{} ({})",
                isa.triple(),
                isa.isa_flags()
                    .iter()
                    .filter(|f| f.as_bool() == Some(true))
                    .map(|f| f.name)
                    .collect::<Vec<_>>()
                    .join(",")
            )
        }
        Err(e) => e.to_string(),
    }
}

/// Compiles `k` (or returns the cached compilation of an identical kernel). The result's
/// `disasm` may be empty; use [`compile_with_disasm`] when the machine code listing is wanted.
pub fn compile(k: &LoopKernel) -> Result<CompiledLoop> {
    compile_opts(k, false)
}

/// Like [`compile`], with the disassembly recorded (costs extra compile time; for dumps).
pub fn compile_with_disasm(k: &LoopKernel) -> Result<CompiledLoop> {
    compile_opts(k, true)
}

fn compile_opts(k: &LoopKernel, want_disasm: bool) -> Result<CompiledLoop> {
    let key = format!("{k:?}");
    let mut st = state()?.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = st.cache.get(&key)
        && (!want_disasm || !c.disasm.is_empty())
    {
        tracing::trace!(target: "tensorjit::codegen", ops = k.insts.len(), "loop kernel found in the cache");
        return Ok(c.clone());
    }
    // The vector form first; if Cranelift cannot lower it on this host, the scalar loop.
    let mut last_err = String::new();
    for vector in [true, false] {
        match define(&mut st, k, vector, false, want_disasm)? {
            Ok(Some(c)) => {
                tracing::debug!(
                    target: "tensorjit::codegen",
                    ops = k.insts.len(),
                    form = if vector { "vector" } else { "scalar" },
                    "loop kernel compiled"
                );
                st.cache.insert(key, c.clone());
                return Ok(c);
            }
            // Only a streaming variant can come back undefined; kept as an error, not a panic.
            Ok(None) => last_err = format!("jit: internal error: kernel {key} was not defined"),
            Err(e) => last_err = e,
        }
    }
    Err(Error::Execution(last_err))
}

/// The variant of `k` whose vector loop writes its outputs with non-temporal stores (see
/// `stream` module), compiled once per process like [`compile`]; `None` when there is none: a kernel
/// with a reduction, one that does not vectorise, one without a 16-byte output store, or a host
/// whose stores are not VEX-encoded.
///
/// Its [`CompiledLoop::run`] has one more requirement than the ordinary kernel's: every output
/// pointer is 16-byte aligned and `start` is a multiple of 16 elements.
/// With `want_disasm`, the listing is recorded (it shows the stores before the rewrite).
pub fn compile_streaming(k: &LoopKernel, want_disasm: bool) -> Result<Option<CompiledLoop>> {
    let key = format!("{k:?}");
    let mut st = state()?.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = st.stream_cache.get(&key)
        && (!want_disasm || c.as_ref().is_none_or(|c| !c.disasm.is_empty()))
    {
        return Ok(c.clone());
    }
    let c = if k.reduce.is_none() && cfg!(target_arch = "x86_64") {
        define(&mut st, k, true, true, want_disasm)?.ok().flatten()
    } else {
        None
    };
    st.stream_cache.insert(key, c.clone());
    Ok(c)
}

/// Generates, compiles and defines one function for `k`. The outer error is for failures that
/// make the JIT unusable; the inner one for a kernel Cranelift cannot lower in this form. With
/// `stream`, `Ok(None)` when no store could be made non-temporal.
fn define(
    st: &mut JitState,
    k: &LoopKernel,
    vector: bool,
    stream: bool,
    want_disasm: bool,
) -> Result<std::result::Result<Option<CompiledLoop>, String>> {
    let ptr = st.module.target_config().pointer_type();
    st.module.clear_context(&mut st.ctx);
    st.ctx.func.signature.call_conv = st.module.isa().default_call_conv();
    {
        let mut b = FunctionBuilder::new(&mut st.ctx.func, &mut st.fctx);
        emit::build(&mut b, k, ptr, vector, stream).map_err(|e| Error::not_implemented("jit", e))?;
        b.finalize();
    }
    let clif = st.ctx.func.display().to_string();
    st.counter += 1;
    let name = format!("tj_loop_{}", st.counter);
    let id = st
        .module
        .declare_function(&name, Linkage::Local, &st.ctx.func.signature)
        .map_err(|e| Error::Execution(format!("jit: declare {name}: {e}")))?;
    st.ctx.set_disasm(want_disasm);
    // Some(stores rewritten, 0 for an ordinary kernel) once defined; None: nothing defined.
    let defined = if stream {
        define_streaming(st, id, &name)
    } else {
        st.module.define_function(id, &mut st.ctx).map(|()| Some(0)).map_err(|e| format!("jit: compile {name}: {e:?}"))
    };
    let mut disasm = st.ctx.compiled_code().and_then(|c| c.vcode.clone()).unwrap_or_default();
    st.module.clear_context(&mut st.ctx);
    match defined {
        Ok(Some(patched)) => {
            if patched > 0 && !disasm.is_empty() {
                disasm.insert_str(
                    0,
                    &format!(
                        "; the vector loop's {patched} 16-byte output stores below run as vmovntps (rewritten after compilation)\n"
                    ),
                );
            }
        }
        Ok(None) => return Ok(Ok(None)),
        Err(e) => return Ok(Err(e)),
    }
    st.module.finalize_definitions().map_err(|e| Error::Execution(format!("jit: finalize {name}: {e}")))?;
    let code = st.module.get_finalized_function(id);
    // SAFETY: `code` is the entry of a function just compiled with the signature
    // (ptr, ptr, ptr) -> () in the host's default (C) calling convention, which is `KernelFn`.
    let f = unsafe { std::mem::transmute::<*const u8, KernelFn>(code) };
    Ok(Ok(Some(CompiledLoop { f, clif: Arc::new(clif), disasm: Arc::new(disasm) })))
}

/// Compiles the function in `st.ctx`, rewrites its tagged output stores to non-temporal ones
/// ([`stream::patch_stores`]) and defines the bytes as `id`. Returns the number of stores
/// rewritten, or `None` (nothing defined) when there is none to rewrite.
fn define_streaming(st: &mut JitState, id: FuncId, name: &str) -> std::result::Result<Option<usize>, String> {
    st.ctx
        .compile(st.module.isa(), &mut ControlPlane::default())
        .map_err(|e| format!("jit: compile {name}: {:?}", e.inner))?;
    let code = st.ctx.compiled_code().expect("compiled just above");
    let mut bytes = code.code_buffer().to_vec();
    let ranges: Vec<(usize, usize)> = code
        .buffer
        .get_srclocs_sorted()
        .iter()
        .filter(|r| r.loc.bits() == emit::STREAM_MARK)
        .map(|r| (r.start as usize, r.end as usize))
        .collect();
    let align = code.buffer.alignment as u64;
    let relocs: Vec<ModuleReloc> =
        code.buffer.relocs().iter().map(|r| ModuleReloc::from_mach_reloc(r, &st.ctx.func, id)).collect();
    let Some(n) = stream::patch_stores(&mut bytes, &ranges).filter(|&n| n > 0) else {
        return Ok(None);
    };
    st.module.define_function_bytes(id, align, &bytes, &relocs).map_err(|e| format!("jit: define {name}: {e:?}"))?;
    Ok(Some(n))
}

/// Number of distinct kernels compiled so far in this process.
// Only the crate's own tests and benches use it (feature `internals`).
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub fn compiled_count() -> usize {
    state().map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).cache.len()).unwrap_or(0)
}

/// Forgets every cached compilation, so the next [`compile`] of any kernel runs Cranelift again
/// (for measuring cold compile times). The machine code already handed out stays valid: it is
/// never unmapped.
// Only the crate's own benches use it (feature `internals`).
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub fn clear_cache() {
    if let Ok(s) = state() {
        s.lock().unwrap_or_else(|e| e.into_inner()).cache.clear();
    }
}
