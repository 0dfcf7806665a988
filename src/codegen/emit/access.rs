//! Loads, broadcasts and stores of one element or vector, with the half and Bool
//! widenings and narrowings.

use super::*;

impl Cg<'_, '_> {
    /// Loads one element (or vector) of type `ty` at `addr`, as a register value.
    pub(super) fn load(&mut self, ty: Ty, addr: Value) -> Value {
        let flags = MemFlags::new().with_notrap();
        match ty {
            Ty::F16 | Ty::BF16 => {
                let w = if self.lanes == 1 {
                    let h = self.b.ins().load(types::I16, flags, addr, 0);
                    self.b.ins().uextend(types::I32, h)
                } else {
                    // Four halves (eight bytes), zero-extended to four 32-bit lanes.
                    let x = self.b.ins().load(types::I64, flags, addr, 0);
                    let v = self.b.ins().scalar_to_vector(types::I64X2, x);
                    let v = self.b.ins().bitcast(types::I16X8, math::little_endian(), v);
                    self.b.ins().uwiden_low(v)
                };
                if ty == Ty::F16 { self.f16_bits_to_f32(w) } else { self.bf16_bits_to_f32(w) }
            }
            Ty::Bool if self.lanes == 4 => {
                // Four bytes, widened to four 32-bit lanes.
                let x = self.b.ins().load(types::I32, flags, addr, 0);
                let v = self.b.ins().scalar_to_vector(types::I32X4, x);
                let v = self.b.ins().bitcast(types::I8X16, math::little_endian(), v);
                let v = self.b.ins().uwiden_low(v);
                self.b.ins().uwiden_low(v)
            }
            t => {
                let rt = self.rty(t);
                self.b.ins().load(rt, flags, addr, 0)
            }
        }
    }

    /// A register of this loop holding the scalar element `x` of type `ty` in every lane (a Bool,
    /// an i8 0/1 as loaded, widened first where Bool lanes are 32-bit).
    pub(super) fn broadcast(&mut self, ty: Ty, x: Value) -> Value {
        let x = if ty == Ty::Bool && self.lanes == 4 { self.b.ins().uextend(types::I32, x) } else { x };
        let lt = self.lt(ty);
        self.splat(lt, x)
    }

    /// Stores `v` (of type `ty`; an F16/BF16 register holds an f32 already rounded to its type)
    /// at `addr`. With `stream`, a full 16-byte vector store is tagged
    /// with [`STREAM_MARK`] so the JIT can turn it into a non-temporal store (see `jit::stream`).
    pub(super) fn store(&mut self, ty: Ty, v: Value, addr: Value, stream: bool) {
        let flags = MemFlags::new().with_notrap();
        let v = match ty {
            Ty::F16 | Ty::BF16 => {
                let w = if ty == Ty::F16 { self.f32_to_f16_bits(v) } else { self.f32_to_bf16_bits(v) };
                if self.lanes == 1 {
                    self.b.ins().ireduce(types::I16, w)
                } else {
                    // Four 16-bit patterns (each < 2¹⁶, so the unsigned saturation keeps them)
                    // packed into eight bytes.
                    let h = self.b.ins().unarrow(w, w);
                    let q = self.b.ins().bitcast(types::I64X2, math::little_endian(), h);
                    self.b.ins().extractlane(q, 0)
                }
            }
            Ty::Bool if self.lanes == 4 => {
                // Four 32-bit 0/1 lanes narrowed to four bytes.
                let h = self.b.ins().snarrow(v, v);
                let q = self.b.ins().snarrow(h, h);
                let w = self.b.ins().bitcast(types::I32X4, math::little_endian(), q);
                self.b.ins().extractlane(w, 0)
            }
            _ => v,
        };
        let mark = stream && self.b.func.dfg.value_type(v).bits() == 128;
        if mark {
            self.b.set_srcloc(SourceLoc::new(STREAM_MARK));
        }
        self.b.ins().store(flags, v, addr, 0);
        if mark {
            self.b.set_srcloc(SourceLoc::default());
        }
    }
}
