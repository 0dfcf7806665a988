//! Non-temporal ("streaming") output stores for loop kernels whose outputs exceed the last-level
//! cache: Cranelift has no non-temporal store, so the vector stores tagged by codegen are
//! rewritten in the finished machine code, each 16-byte VEX move to memory becoming `vmovntps`.
//!
//! A store to memory that is not in cache first reads the line it writes (a read for ownership),
//! so a loop writing a fresh output moves three bytes over the memory bus for every two it
//! counts; a non-temporal store writes the line without reading it. That only pays when the
//! output will not be read back from cache soon, i.e. when it is larger than the cache; the
//! runtime decides that (see `runtime::jit::loops`). `vmovntps` faults on an address that is not
//! 16-byte aligned, so a streaming kernel may only be called with 16-byte aligned output
//! pointers and a `start` that keeps every vector aligned (the runtime checks both).
//!
//! The rewrite is byte-exact and conservative: every tagged range must consist of VEX.128
//! register-to-memory moves (`vmovups`, `vmovupd`, `vmovaps`, `vmovapd`, `vmovdqu`, `vmovdqa`;
//! several when tagged stores are adjacent) to an address based on a register other than rsp
//! and rbp (Cranelift emits register-allocator spills inside a tagged range when they follow a
//! store; the frame pointer is never an output pointer), whose lengths are found by decoding
//! ModRM/SIB/displacement;
//! otherwise nothing is patched and the caller keeps the ordinary kernel. `vmovntps` has the
//! same operands and length (only the opcode and the implied prefix differ), so the code's layout
//! and every branch target are unchanged.

/// Opcode of `vmovntps m128, xmm` (VEX.128.0F.WIG 2B /r).
const MOVNTPS: u8 = 0x2B;

/// Where the VEX `pp` field and the opcode of one instruction are, and its total length.
struct VexMove {
    pp_byte: usize,
    opcode: usize,
    len: usize,
}

/// Decodes the start of `code` as one VEX.128 0F-map register-to-memory vector move; `None` if
/// it is anything else (another instruction, a 256-bit or register form, a RIP-relative operand)
/// or is cut short.
fn decode_store(code: &[u8]) -> Option<VexMove> {
    let (pp_byte, opcode) = match *code.first()? {
        // Two-byte VEX: C5 [R vvvv L pp] opcode; the map is 0F.
        0xC5 => (1, 2),
        // Three-byte VEX: C4 [R X B mmmmm] [W vvvv L pp] opcode; the map must be 0F.
        0xC4 if code.get(1)? & 0x1F == 1 => (2, 3),
        _ => return None,
    };
    let p = *code.get(pp_byte)?;
    let (vvvv, l, pp) = ((p >> 3) & 0xF, (p >> 2) & 1, p & 3);
    // A move has no second source (vvvv = 1111 inverted) and must be 128-bit (L = 0).
    if vvvv != 0xF || l != 0 {
        return None;
    }
    let op = *code.get(opcode)?;
    let is_store = matches!((pp, op), (0 | 1, 0x11) | (0 | 1, 0x29) | (1 | 2, 0x7F));
    if !is_store {
        return None;
    }
    let modrm = *code.get(opcode + 1)?;
    let (md, rm) = (modrm >> 6, modrm & 7);
    if md == 3 {
        return None; // register destination
    }
    // VEX.B extends the base register (stored inverted; the two-byte form implies 0).
    let b_ext = if code[0] == 0xC4 { (!code[1] >> 5) & 1 } else { 0 };
    let mut len = opcode + 2;
    let base = if rm == 4 {
        let sib = *code.get(len)?;
        len += 1;
        if md == 0 && sib & 7 == 5 {
            return None; // no base register: an absolute or index-only address
        }
        (sib & 7) | (b_ext << 3)
    } else if md == 0 && rm == 5 {
        return None; // RIP-relative: never an output pointer
    } else {
        rm | (b_ext << 3)
    };
    // rsp / rbp: a spill to the stack (register-allocator moves are emitted inside the tagged
    // range when they follow a store), whose slot need not be 16-byte aligned.
    if base == 4 || base == 5 {
        return None;
    }
    len += match md {
        1 => 1,
        2 => 4,
        _ => 0,
    };
    (len <= code.len()).then_some(VexMove { pp_byte, opcode, len })
}

/// Rewrites the 16-byte vector stores filling each range of `code` (byte offsets `start..end`;
/// adjacent tagged stores share one range) into `vmovntps` with the same operands. Returns the
/// number of stores rewritten, or `None` (and leaves `code` untouched) if any range is not made
/// of such stores exactly or lies outside `code`.
pub(crate) fn patch_stores(code: &mut [u8], ranges: &[(usize, usize)]) -> Option<usize> {
    let mut found = Vec::with_capacity(ranges.len());
    for &(start, end) in ranges {
        let mut at = start;
        while at < end {
            let m = decode_store(code.get(at..end)?)?;
            let len = m.len;
            found.push((at, m));
            at += len;
        }
    }
    for (start, m) in &found {
        code[start + m.pp_byte] &= !3;
        code[start + m.opcode] = MOVNTPS;
    }
    Some(found.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Encodings below were produced by GNU as (`as` + `objdump -d`), not by this module.

    fn patched(bytes: &[u8]) -> Option<Vec<u8>> {
        let mut v = bytes.to_vec();
        let n = patch_stores(&mut v, &[(0, bytes.len())])?;
        assert_eq!(n, 1);
        Some(v)
    }

    #[test]
    fn vector_stores_become_movntps() {
        // vmovups %xmm9,(%r10,%rdi,4) -> vmovntps %xmm9,(%r10,%rdi,4)
        assert_eq!(patched(&[0xc4, 0x41, 0x78, 0x11, 0x0c, 0xba]).unwrap(), [0xc4, 0x41, 0x78, 0x2b, 0x0c, 0xba]);
        // vmovups %xmm0,(%rax) -> vmovntps %xmm0,(%rax)
        assert_eq!(patched(&[0xc5, 0xf8, 0x11, 0x00]).unwrap(), [0xc5, 0xf8, 0x2b, 0x00]);
        // vmovdqu %xmm3,(%rcx,%r8,1) -> vmovntps %xmm3,(%rcx,%r8,1)
        assert_eq!(patched(&[0xc4, 0xa1, 0x7a, 0x7f, 0x1c, 0x01]).unwrap(), [0xc4, 0xa1, 0x78, 0x2b, 0x1c, 0x01]);
        // vmovupd %xmm12,0x1000(%rbx) -> vmovntps %xmm12,0x1000(%rbx)
        assert_eq!(
            patched(&[0xc5, 0x79, 0x11, 0xa3, 0x00, 0x10, 0x00, 0x00]).unwrap(),
            [0xc5, 0x78, 0x2b, 0xa3, 0x00, 0x10, 0x00, 0x00]
        );
        // vmovups %xmm2,0x10(%rsi,%rdx,8): SIB and disp8.
        assert_eq!(patched(&[0xc5, 0xf8, 0x11, 0x54, 0xd6, 0x10]).unwrap(), [0xc5, 0xf8, 0x2b, 0x54, 0xd6, 0x10]);
        // vmovups %xmm1,0x0(%r13) and (%r12): base registers that force a disp8 / a SIB byte.
        assert_eq!(patched(&[0xc4, 0xc1, 0x78, 0x11, 0x4d, 0x00]).unwrap(), [0xc4, 0xc1, 0x78, 0x2b, 0x4d, 0x00]);
        assert_eq!(patched(&[0xc4, 0xc1, 0x78, 0x11, 0x0c, 0x24]).unwrap(), [0xc4, 0xc1, 0x78, 0x2b, 0x0c, 0x24]);
    }

    #[test]
    fn anything_else_is_left_alone() {
        let reject: &[&[u8]] = &[
            &[0xc5, 0xf8, 0x10, 0x08],                         // vmovups (%rax),%xmm1 (a load)
            &[0xc5, 0xfa, 0x11, 0x08],                         // vmovss %xmm1,(%rax) (scalar)
            &[0xc5, 0xf8, 0x11, 0x0d, 0x00, 0x00, 0x00, 0x00], // vmovups %xmm1,0x0(%rip)
            &[0xc5, 0xfc, 0x11, 0x00],                         // vmovups %ymm0,(%rax) (256-bit)
            &[0xc5, 0xf8, 0x11, 0xc1],                         // vmovups %xmm0,%xmm1 (register)
            &[0xc5, 0xf8, 0x11, 0x00, 0x90],                   // a store followed by a nop
            &[0xc5, 0xf8, 0x11],                               // truncated
            &[0x0f, 0x11, 0x00],                               // legacy SSE movups (not VEX)
            &[0xc5, 0xf8, 0x11, 0x4d, 0x00],                   // vmovups %xmm1,0x0(%rbp) (stack)
            &[0xc5, 0xf8, 0x11, 0x0c, 0x24],                   // vmovups %xmm1,(%rsp) (stack)
            &[0xc5, 0xfa, 0x7f, 0x44, 0x24, 0x10],             // vmovdqu %xmm0,0x10(%rsp) (a spill)
        ];
        for bytes in reject {
            let mut v = bytes.to_vec();
            assert_eq!(patch_stores(&mut v, &[(0, bytes.len())]), None, "{bytes:02x?}");
            assert_eq!(&v, bytes);
        }
    }

    #[test]
    fn adjacent_stores_in_one_range_are_all_rewritten() {
        // vmovups %xmm9,(%r10,%rdi,4); vmovups %xmm0,(%rax) as one tagged range.
        let mut code = vec![0xc4, 0x41, 0x78, 0x11, 0x0c, 0xba, 0xc5, 0xf8, 0x11, 0x00];
        assert_eq!(patch_stores(&mut code, &[(0, 10)]), Some(2));
        assert_eq!(code, [0xc4, 0x41, 0x78, 0x2b, 0x0c, 0xba, 0xc5, 0xf8, 0x2b, 0x00]);
        // A store followed by a nop, or by a spill to the stack, in the same range: nothing is
        // rewritten.
        for tail in [&[0x90u8][..], &[0xc5, 0xfa, 0x7f, 0x44, 0x24, 0x10]] {
            let mut code = vec![0xc5, 0xf8, 0x11, 0x00];
            code.extend_from_slice(tail);
            let before = code.clone();
            assert_eq!(patch_stores(&mut code, &[(0, before.len())]), None);
            assert_eq!(code, before);
        }
    }

    #[test]
    fn one_bad_range_patches_nothing() {
        let mut code = vec![0xc5, 0xf8, 0x11, 0x00, 0xc5, 0xfa, 0x11, 0x08];
        let before = code.clone();
        assert_eq!(patch_stores(&mut code, &[(0, 4), (4, 8)]), None);
        assert_eq!(code, before);
        assert_eq!(patch_stores(&mut code, &[(0, 4), (6, 12)]), None);
        assert_eq!(code, before);
    }
}
