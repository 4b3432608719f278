//! Element-wise functions on CUDA (`kernels/elementwise.cu`): one launch per op, reading
//! each operand through its strides (transposed, sliced, broadcast views are not copied)
//! and writing a dense output, with the CPU kernels' semantics (`backend/cpu/elementwise.rs`).
//! A kernel per dtype takes the function as an op code and two scalar parameters; the codes
//! are given here, in [`unary_code`], [`binary_code`] and [`compare_code`], and nowhere
//! else. Comparisons and `where` are here too: candle's CUDA ones have no int32 kernels.

use candle_core::op::CmpOp;
use candle_core::{DType, Tensor};

use super::launch::{addr, addrs, launch, layout_table, Addr, Arg, Grid, Kernel};
use super::{dtype_suffix, intern, ptx, Cuda};
use crate::backend::{Bin, ElementwiseOps, Pred, UnaryOp};
use crate::error::{CandleContext, Error, Result};

const THREADS: u32 = 256;

/// A unary function's code in `elementwise.cu` (`enum Unary`) and its parameters p0, p1.
fn unary_code(op: UnaryOp) -> (i32, f64, f64) {
    use UnaryOp as U;
    let code = match op {
        U::Neg => 0,
        U::Abs => 1,
        U::Sign => 2,
        U::Square => 3,
        U::Reciprocal => 4,
        U::Exp => 5,
        U::Log => 6,
        U::Log2 => 7,
        U::Log10 => 8,
        U::Log1p => 9,
        U::Expm1 => 10,
        U::Sqrt => 11,
        U::Rsqrt => 12,
        U::Sin => 13,
        U::Cos => 14,
        U::Tan => 15,
        U::Tanh => 16,
        U::Asin => 17,
        U::Acos => 18,
        U::Atan => 19,
        U::Sinh => 20,
        U::Cosh => 21,
        U::Asinh => 22,
        U::Acosh => 23,
        U::Atanh => 24,
        U::Sigmoid => 25,
        U::Relu => 26,
        U::Softplus { .. } => 27,
        U::Gelu => 28,
        U::GeluTanh => 29,
        U::Silu => 30,
        U::Erf => 31,
        U::Floor => 32,
        U::Ceil => 33,
        U::Round => 34,
        U::Trunc => 35,
        U::Frac => 36,
        U::PowScalar(_) => 37,
        U::ScalarPow(_) => 38,
        U::BitNot => 39,
    };
    let (p0, p1) = match op {
        U::Softplus { beta, threshold } => (beta, threshold),
        U::PowScalar(e) => (e, 0.0),
        U::ScalarPow(b) => (b, 0.0),
        _ => (0.0, 0.0),
    };
    (code, p0, p1)
}

/// A binary function's code in `elementwise.cu` (`enum Binary`) and its parameters; `None`
/// for a backward the kernel has no fused form of.
fn binary_code(op: Bin) -> Option<(i32, f64, f64)> {
    let code = match op {
        Bin::Add => 0,
        Bin::Sub => 1,
        Bin::Mul => 2,
        Bin::Div => 3,
        Bin::Pow => 4,
        Bin::FloorDiv => 5,
        Bin::TruncDiv => 6,
        Bin::Rem => 7,
        Bin::Fmod => 8,
        Bin::Atan2 => 9,
        Bin::Hypot => 10,
        Bin::Max => 11,
        Bin::Min => 12,
        Bin::And => 13,
        Bin::Or => 14,
        Bin::Xor => 15,
        Bin::Grad(UnaryOp::Sigmoid) => 16,
        Bin::Grad(UnaryOp::Silu) => 17,
        Bin::Grad(UnaryOp::Gelu) => 18,
        Bin::Grad(UnaryOp::GeluTanh) => 19,
        Bin::Grad(UnaryOp::Softplus { beta, threshold }) => return Some((20, beta, threshold)),
        Bin::Grad(UnaryOp::Tanh) => 21,
        Bin::Grad(_) => return None,
    };
    Some((code, 0.0, 0.0))
}

/// The kernel's comparison code (elementwise.cu's `Compare`).
fn compare_code(op: CmpOp) -> i32 {
    match op {
        CmpOp::Eq => 0,
        CmpOp::Ne => 1,
        CmpOp::Lt => 2,
        CmpOp::Le => 3,
        CmpOp::Gt => 4,
        CmpOp::Ge => 5,
    }
}

fn pred_code(p: Pred) -> i32 {
    match p {
        Pred::IsNan => 0,
        Pred::IsInf => 1,
        Pred::IsFinite => 2,
    }
}

/// The error the CPU kernel gives for what it does not compute (a candle error there).
fn refuse(name: &'static str, msg: String) -> Error {
    Error::Candle {
        op: name,
        source: candle_core::Error::Msg(msg),
    }
}

/// The dtypes the element-wise kernels take (bool data is u8).
fn takes(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 | DType::U8 | DType::I32 | DType::I64
    )
}

/// The unary functions the integer kernel has: PyTorch's integer ops (the rest convert
/// integers to float before they get here, or refuse them).
fn int_unary(op: UnaryOp) -> bool {
    use UnaryOp as U;
    matches!(
        op,
        U::Neg
            | U::Abs
            | U::Sign
            | U::Square
            | U::Relu
            | U::Floor
            | U::Ceil
            | U::Round
            | U::Trunc
            | U::BitNot
            | U::PowScalar(_)
    )
}

/// The layout table a kernel reads `t` through; none for a dense `t`, read directly.
pub(super) fn table_of(t: &Tensor) -> Result<Option<Tensor>> {
    Ok(if t.is_contiguous() {
        None
    } else {
        Some(layout_table(t)?.0)
    })
}

/// The address of a layout table, held while the launch is queued; 0 (null) for none.
pub(super) fn table_addr(t: &Option<Tensor>) -> Result<(Option<Addr<'_>>, u64)> {
    let a = t.as_ref().map(addr).transpose()?;
    let p = a.as_ref().map_or(0, |a| a.addr);
    Ok((a, p))
}

/// A dense output of `x`'s shape.
pub(super) fn dense_like(name: &'static str, x: &Tensor, dtype: DType) -> Result<Tensor> {
    crate::device::zeros(x.shape(), dtype, x.device()).op(name)
}

/// `gs_<kind>_<suffix>` of the element-wise module, interned.
fn kernel(kind: &str, dtype: DType) -> Kernel {
    Kernel {
        module: &ptx::ELEMENTWISE,
        name: intern(format!("gs_{kind}_{}", dtype_suffix(dtype))),
    }
}

impl ElementwiseOps for Cuda {
    fn unary(&self, name: &'static str, op: UnaryOp, x: &Tensor) -> Result<Tensor> {
        let dtype = x.dtype();
        if !takes(dtype) {
            return Err(refuse(name, format!("{op:?}: unsupported dtype {dtype:?}")));
        }
        if dtype.is_float() && op == UnaryOp::BitNot {
            return Err(refuse(
                name,
                "bitwise not is not implemented for floating point".into(),
            ));
        }
        if !dtype.is_float() && !int_unary(op) {
            return Err(refuse(
                name,
                format!("{op:?} is not implemented for integer tensors"),
            ));
        }
        let out = dense_like(name, x, dtype)?;
        let n = x.elem_count();
        if n == 0 {
            return Ok(out);
        }
        let (code, p0, p1) = unary_code(op);
        let table = table_of(x)?;
        {
            let (xa, oa) = (addr(x)?, addr(&out)?);
            let (_t, ta) = table_addr(&table)?;
            let args = [
                Arg::I64(n as i64),
                Arg::Ptr(xa.addr),
                Arg::Ptr(ta),
                Arg::I32(x.rank() as i32),
                Arg::Ptr(oa.addr),
                Arg::I32(code),
                Arg::F64(p0),
                Arg::F64(p1),
            ];
            let grid = Grid::elementwise(n, THREADS);
            launch(x.device(), kernel("unary", dtype), grid, &args)?;
        }
        Ok(out)
    }

    fn binary(&self, name: &'static str, op: Bin, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        let dtype = a.dtype();
        if a.dims() != b.dims() {
            return Err(refuse(
                name,
                format!(
                    "{op:?}: operand shapes differ {:?} {:?}",
                    a.dims(),
                    b.dims()
                ),
            ));
        }
        if b.dtype() != dtype || !takes(dtype) {
            return Err(refuse(
                name,
                format!(
                    "{op:?}: operand dtypes differ or are not supported ({dtype:?} vs {:?})",
                    b.dtype()
                ),
            ));
        }
        let refused = match op {
            Bin::And | Bin::Or | Bin::Xor if dtype.is_float() => Some(format!(
                "bitwise {op:?} is not implemented for floating point tensors"
            )),
            Bin::Div | Bin::Atan2 | Bin::Hypot if !dtype.is_float() => {
                Some(format!("{op:?} of integers is done in floating point"))
            }
            Bin::Grad(f) if !dtype.is_float() => {
                Some(format!("{f:?} backward is for floating point tensors"))
            }
            _ => None,
        };
        if let Some(msg) = refused {
            return Err(refuse(name, msg));
        }
        let Some((code, p0, p1)) = binary_code(op) else {
            let Bin::Grad(f) = op else { unreachable!() };
            return Err(refuse(name, format!("{f:?} has no fused backward kernel")));
        };
        let out = dense_like(name, a, dtype)?;
        let n = a.elem_count();
        if n == 0 {
            return Ok(out);
        }
        let (table_a, table_b) = (table_of(a)?, table_of(b)?);
        {
            let (_g, p) = addrs(&[a, b, &out])?;
            let (_ta, ta) = table_addr(&table_a)?;
            let (_tb, tb) = table_addr(&table_b)?;
            let args = [
                Arg::I64(n as i64),
                Arg::Ptr(p[0]),
                Arg::Ptr(ta),
                Arg::Ptr(p[1]),
                Arg::Ptr(tb),
                Arg::I32(a.rank() as i32),
                Arg::Ptr(p[2]),
                Arg::I32(code),
                Arg::F64(p0),
                Arg::F64(p1),
            ];
            let grid = Grid::elementwise(n, THREADS);
            launch(a.device(), kernel("binary", dtype), grid, &args)?;
        }
        Ok(out)
    }

    fn predicate(&self, name: &'static str, p: Pred, x: &Tensor) -> Result<Tensor> {
        let dtype = x.dtype();
        if !matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
            return Err(refuse(name, format!("{p:?}: unsupported dtype {dtype:?}")));
        }
        let out = dense_like(name, x, DType::U8)?;
        let n = x.elem_count();
        if n == 0 {
            return Ok(out);
        }
        let table = table_of(x)?;
        {
            let (xa, oa) = (addr(x)?, addr(&out)?);
            let (_t, ta) = table_addr(&table)?;
            let args = [
                Arg::I64(n as i64),
                Arg::Ptr(xa.addr),
                Arg::Ptr(ta),
                Arg::I32(x.rank() as i32),
                Arg::Ptr(oa.addr),
                Arg::I32(pred_code(p)),
            ];
            let grid = Grid::elementwise(n, THREADS);
            launch(x.device(), kernel("predicate", dtype), grid, &args)?;
        }
        Ok(out)
    }

    fn compare(&self, name: &'static str, op: CmpOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        let dtype = a.dtype();
        if a.dims() != b.dims() || b.dtype() != dtype || !takes(dtype) {
            return Err(refuse(
                name,
                format!(
                    "compare {}: operands {:?} {dtype:?} and {:?} {:?}",
                    compare_code(op),
                    a.dims(),
                    b.dims(),
                    b.dtype()
                ),
            ));
        }
        let out = dense_like(name, a, DType::U8)?;
        let n = a.elem_count();
        if n == 0 {
            return Ok(out);
        }
        let (table_a, table_b) = (table_of(a)?, table_of(b)?);
        {
            let (_g, p) = addrs(&[a, b, &out])?;
            let (_ta, ta) = table_addr(&table_a)?;
            let (_tb, tb) = table_addr(&table_b)?;
            let args = [
                Arg::I64(n as i64),
                Arg::Ptr(p[0]),
                Arg::Ptr(ta),
                Arg::Ptr(p[1]),
                Arg::Ptr(tb),
                Arg::I32(a.rank() as i32),
                Arg::Ptr(p[2]),
                Arg::I32(compare_code(op)),
            ];
            let grid = Grid::elementwise(n, THREADS);
            launch(a.device(), kernel("compare", dtype), grid, &args)?;
        }
        Ok(out)
    }

    fn select(&self, name: &'static str, cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        let dtype = a.dtype();
        if a.dims() != b.dims() || cond.dims() != a.dims() || b.dtype() != dtype {
            return Err(refuse(
                name,
                format!(
                    "where: operands {:?} {dtype:?} and {:?} {:?}, condition {:?}",
                    a.dims(),
                    b.dims(),
                    b.dtype(),
                    cond.dims()
                ),
            ));
        }
        let out = dense_like(name, a, dtype)?;
        let n = a.elem_count();
        if n == 0 {
            return Ok(out);
        }
        let size = super::inplace::size_suffix(name, dtype)?;
        let tables = [table_of(cond)?, table_of(a)?, table_of(b)?];
        {
            let (_g, p) = addrs(&[cond, a, b, &out])?;
            let (_tc, tc) = table_addr(&tables[0])?;
            let (_ta, ta) = table_addr(&tables[1])?;
            let (_tb, tb) = table_addr(&tables[2])?;
            let args = [
                Arg::I64(n as i64),
                Arg::Ptr(p[0]),
                Arg::Ptr(tc),
                Arg::Ptr(p[1]),
                Arg::Ptr(ta),
                Arg::Ptr(p[2]),
                Arg::Ptr(tb),
                Arg::I32(a.rank() as i32),
                Arg::Ptr(p[3]),
            ];
            let kernel = Kernel {
                module: &ptx::ELEMENTWISE,
                name: intern(format!("gs_where_{size}")),
            };
            launch(a.device(), kernel, Grid::elementwise(n, THREADS), &args)?;
        }
        Ok(out)
    }
}

#[cfg(all(test, feature = "cuda-emulator"))]
mod tests {
    use candle_core::{DType, Device, IndexOp, Tensor};

    use super::{compare_code, Cuda};
    use crate::backend::cpu::Cpu;
    use crate::backend::{Bin, ElementwiseOps, Pred, UnaryOp};
    use crate::error::{CandleContext, Result};

    const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
    const INTS: [DType; 3] = [DType::U8, DType::I32, DType::I64];
    const SIZES: [usize; 6] = [0, 1, 31, 33, 1000, 70000];

    /// A reproducible stream of 64-bit words (an LCG).
    fn words(seed: u64) -> impl Iterator<Item = u64> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        std::iter::repeat_with(move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 11
        })
    }

    /// Float values: the specials (NaN, ±inf, ±0, halves for rounding, the edges of the
    /// inverse trig and hyperbolic domains) first, then uniform in [-4, 4] with a few large.
    fn float_values(n: usize, seed: u64) -> Vec<f64> {
        const SPECIAL: [f64; 24] = [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -2.5,
            2.5,
            1.0,
            -1.0,
            3.0,
            -3.0,
            0.999,
            -1e-3,
            25.0,
            -25.0,
            100.0,
            -7.75,
            1e-5,
            60000.0,
            -1e5,
            -9.0,
        ];
        let mut r = words(seed);
        (0..n)
            .map(|i| {
                if i < SPECIAL.len() && (seed % 2 == 0 || i >= 3) {
                    SPECIAL[(i + seed as usize) % SPECIAL.len()]
                } else {
                    let u = r.next().unwrap() as f64 / (1u64 << 53) as f64;
                    let v = -4.0 + 8.0 * u;
                    if i % 97 == 5 {
                        v * 300.0
                    } else {
                        v
                    }
                }
            })
            .collect()
    }

    /// Integer values: the type's extremes, 0, ±1 first, then small ones (|v| < 12) and a
    /// few anywhere in the type's range.
    fn int_tensor(n: usize, seed: u64, dtype: DType) -> Tensor {
        let mut r = words(seed);
        let v: Vec<i64> = (0..n)
            .map(|i| {
                let w = r.next().unwrap();
                match (i + seed as usize) % 11 {
                    0 => [i64::MIN, i64::MAX, 0, 1, -1, 255, 2, -2][(w % 8) as usize],
                    1 => (w << 11) as i64,
                    _ => (w % 23) as i64 - 11,
                }
            })
            .collect();
        let dev = &Device::Cpu;
        match dtype {
            DType::U8 => Tensor::from_vec(v.iter().map(|&x| x as u8).collect(), n, dev),
            DType::I32 => Tensor::from_vec(v.iter().map(|&x| x as i32).collect(), n, dev),
            _ => Tensor::from_vec(v, n, dev),
        }
        .unwrap()
    }

    fn tensor(n: usize, seed: u64, dtype: DType) -> Tensor {
        if dtype.is_float() {
            Tensor::from_vec(float_values(n, seed), n, &Device::Cpu)
                .unwrap()
                .to_dtype(dtype)
                .unwrap()
        } else {
            int_tensor(n, seed, dtype)
        }
    }

    /// Views of `n` elements over a tensor of `dtype`: dense, and where `n` allows it
    /// transposed, a stepped slice with a start offset, a broadcast row, a 0-d tensor.
    fn layouts(n: usize, seed: u64, dtype: DType) -> Vec<(String, Tensor)> {
        let mut v = vec![(format!("dense {n}"), tensor(n, seed, dtype))];
        let split = [(3, 11), (40, 25), (7, 10000)]
            .into_iter()
            .find(|&(r, c)| r * c == n);
        if let Some((r, c)) = split {
            let t = tensor(n, seed, dtype).reshape((c, r)).unwrap().t().unwrap();
            v.push((format!("transposed {r}x{c}"), t));
            let row = tensor(c, seed, dtype).reshape((1, c)).unwrap();
            v.push((
                format!("broadcast 1x{c} to {r}x{c}"),
                row.broadcast_as((r, c)).unwrap(),
            ));
        }
        if n > 0 {
            // Every other element from the second: stride 2, start 1.
            let t = tensor(2 * n + 1, seed, dtype)
                .narrow(0, 1, 2 * n)
                .unwrap()
                .reshape((n, 2))
                .unwrap()
                .i((.., 0))
                .unwrap();
            v.push((format!("stepped {n}"), t));
        }
        if n == 1 {
            v.push(("0-d".into(), tensor(1, seed, dtype).reshape(()).unwrap()));
        }
        v
    }

    /// The first element where `got` and `want` differ beyond the float dtype's rounding
    /// (`rtol` of the larger magnitude plus `atol`; NaN where NaN, zeros of the same sign),
    /// or `None` if they agree.
    fn mismatch(got: &Tensor, want: &Tensor, (rtol, atol): (f64, f64)) -> Option<String> {
        if got.dims() != want.dims() || got.dtype() != want.dtype() {
            return Some(format!(
                "{:?} {:?} vs cpu {:?} {:?}",
                got.dims(),
                got.dtype(),
                want.dims(),
                want.dtype()
            ));
        }
        if got.dtype().is_float() {
            let f = |t: &Tensor| {
                t.to_dtype(DType::F64)
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1::<f64>()
                    .unwrap()
            };
            for (i, (a, b)) in f(got).iter().zip(f(want)).enumerate() {
                let ok = if b.is_nan() {
                    a.is_nan()
                } else if b == 0.0 || *a == 0.0 {
                    (*a == b && a.is_sign_negative() == b.is_sign_negative())
                        || (a - b).abs() <= atol.max(1e-30)
                } else {
                    *a == b || (a - b).abs() <= rtol * b.abs().max(a.abs()) + atol
                };
                if !ok {
                    return Some(format!("element {i}: emulated {a:e} vs cpu {b:e}"));
                }
            }
        } else {
            let f = |t: &Tensor| {
                t.to_dtype(DType::I64)
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1::<i64>()
                    .unwrap()
            };
            let (a, b) = (f(got), f(want));
            if let Some(i) = (0..a.len()).find(|&i| a[i] != b[i]) {
                return Some(format!("element {i}: emulated {} vs cpu {}", a[i], b[i]));
            }
        }
        None
    }

    fn same(what: &str, got: &Tensor, want: &Tensor, tol: (f64, f64)) {
        if let Some(m) = mismatch(got, want, tol) {
            panic!("{what}: {m}");
        }
    }

    /// Fails with every case in `failed` (one line each), so one run shows them all.
    fn report(failed: Vec<String>) {
        assert!(
            failed.is_empty(),
            "{} case(s) differ:\n{}",
            failed.len(),
            failed.join("\n")
        );
    }

    /// The relative tolerance of a float dtype: the emulator and the CPU kernels call the
    /// same libm mostly, so f32/f64 agree to an ulp or two; a 16-bit result may round to
    /// the neighbour of the CPU's.
    fn tol(dtype: DType) -> (f64, f64) {
        let rtol = match dtype {
            DType::F64 => 1e-13,
            DType::F32 => 2e-6,
            DType::F16 => 2e-3,
            DType::BF16 => 1.6e-2,
            _ => 0.0,
        };
        (rtol, 0.0)
    }

    fn unary_ops() -> Vec<UnaryOp> {
        use UnaryOp as U;
        vec![
            U::Neg,
            U::Abs,
            U::Sign,
            U::Square,
            U::Reciprocal,
            U::Exp,
            U::Log,
            U::Log2,
            U::Log10,
            U::Log1p,
            U::Expm1,
            U::Sqrt,
            U::Rsqrt,
            U::Sin,
            U::Cos,
            U::Tan,
            U::Tanh,
            U::Asin,
            U::Acos,
            U::Atan,
            U::Sinh,
            U::Cosh,
            U::Asinh,
            U::Acosh,
            U::Atanh,
            U::Sigmoid,
            U::Relu,
            U::Softplus {
                beta: 1.0,
                threshold: 20.0,
            },
            U::Softplus {
                beta: 2.5,
                threshold: 3.0,
            },
            U::Gelu,
            U::GeluTanh,
            U::Silu,
            U::Erf,
            U::Floor,
            U::Ceil,
            U::Round,
            U::Trunc,
            U::Frac,
            U::PowScalar(2.0),
            U::PowScalar(1.0),
            U::PowScalar(0.5),
            U::PowScalar(3.0),
            U::PowScalar(-1.5),
            U::PowScalar(0.0),
            U::PowScalar(-2.0),
            U::PowScalar(f64::NAN),
            U::PowScalar(1e30),
            U::ScalarPow(2.0),
            U::ScalarPow(-2.0),
            U::ScalarPow(0.0),
            U::ScalarPow(1.0),
            U::BitNot,
        ]
    }

    /// GELU's Φ: the CPU kernel's f32 one is a polynomial fit (vmath), accurate to ~1e-7
    /// relative, its f64 one (1 + erf)/2, which cancels in the lower tail (an absolute error
    /// of ~1e-16); the CUDA kernel's is CUDA's normcdf, accurate in both tails. Where Φ is
    /// tiny, and where GELU's derivative Φ(x) + x·φ(x) crosses zero (x ≈ -0.75), those
    /// absolute errors times the incoming gradient (up to 1e5 here) are all that is left:
    /// an absolute tolerance.
    fn op_tol(op: &str, dtype: DType) -> (f64, f64) {
        let (rtol, atol) = tol(dtype);
        if op.starts_with("Gelu ") || op.starts_with("Grad(Gelu)") {
            match dtype {
                DType::F64 => (rtol, 1e-10),
                _ => (rtol.max(1e-4), 1e-4),
            }
        } else {
            (rtol, atol)
        }
    }

    /// Rust's std computes asinh, acosh and atanh with formulas of its own, which lose
    /// accuracy near the edges of their domains (f32 atanh near -1: the ln_1p of a rounded
    /// argument near -1, off by up to a few percent); the CUDA kernel calls CUDA's (libm's
    /// on the emulator), accurate to an ulp or two, as PyTorch's kernels do. So those are
    /// compared with the CPU kernel's f64 result rounded to the dtype, and in f64 with a
    /// tolerance for the CPU formula's own error there.
    fn unary_reference(op: UnaryOp, x: &Tensor) -> Result<Tensor> {
        use UnaryOp as U;
        let exact = matches!(op, U::Asinh | U::Acosh | U::Atanh);
        if exact && x.dtype().is_float() && x.dtype() != DType::F64 {
            let wide = x.to_dtype(DType::F64).op("test")?;
            Cpu.unary("test", op, &wide)?.to_dtype(x.dtype()).op("test")
        } else {
            Cpu.unary("test", op, x)
        }
    }

    fn unary_tol(op: UnaryOp, what: &str, dtype: DType) -> (f64, f64) {
        use UnaryOp as U;
        match (op, dtype) {
            (U::Asinh | U::Acosh | U::Atanh, DType::F64) => (1e-9, 0.0),
            _ => op_tol(what, dtype),
        }
    }

    #[test]
    fn unary_matches_the_cpu_kernel() {
        let mut failed = Vec::new();
        for dtype in FLOATS.into_iter().chain(INTS) {
            for (s, &n) in SIZES.iter().enumerate() {
                for (layout, x) in layouts(n, s as u64, dtype) {
                    for op in unary_ops() {
                        let what = format!("{op:?} {dtype:?} {layout}");
                        let want = unary_reference(op, &x);
                        let got = Cuda.unary("test", op, &x);
                        match (got, want) {
                            (Ok(g), Ok(w)) => {
                                if let Some(m) = mismatch(&g, &w, unary_tol(op, &what, dtype)) {
                                    failed.push(format!("{what}: {m}"));
                                }
                            }
                            (Err(_), Err(_)) => {}
                            (g, w) => failed.push(format!("{what}: emulated {g:?}, cpu {w:?}")),
                        }
                    }
                }
            }
        }
        report(failed);
    }

    fn binary_ops() -> Vec<Bin> {
        use UnaryOp as U;
        vec![
            Bin::Add,
            Bin::Sub,
            Bin::Mul,
            Bin::Div,
            Bin::Pow,
            Bin::FloorDiv,
            Bin::TruncDiv,
            Bin::Rem,
            Bin::Fmod,
            Bin::Atan2,
            Bin::Hypot,
            Bin::Max,
            Bin::Min,
            Bin::And,
            Bin::Or,
            Bin::Xor,
            Bin::Grad(U::Sigmoid),
            Bin::Grad(U::Silu),
            Bin::Grad(U::Gelu),
            Bin::Grad(U::GeluTanh),
            Bin::Grad(U::Softplus {
                beta: 1.0,
                threshold: 20.0,
            }),
            Bin::Grad(U::Softplus {
                beta: 0.5,
                threshold: 1.0,
            }),
            Bin::Grad(U::Tanh),
        ]
    }

    /// Operand pairs of one shape: dense with dense, each layout of `layouts` with a dense
    /// operand on either side, a view with itself (one buffer), and two different views.
    fn pairs(n: usize, seed: u64, dtype: DType) -> Vec<(String, Tensor, Tensor)> {
        let views = layouts(n, seed, dtype);
        let other = layouts(n, seed + 7, dtype);
        let mut v = Vec::new();
        for ((name, a), (_, b)) in views.iter().zip(&other) {
            let dense = tensor(n, seed + 3, dtype).reshape(a.shape()).unwrap();
            v.push((format!("{name} op dense"), a.clone(), dense.clone()));
            v.push((format!("dense op {name}"), dense, a.clone()));
            v.push((format!("{name} op itself"), a.clone(), a.clone()));
            v.push((format!("{name} op another"), a.clone(), b.clone()));
        }
        v
    }

    #[test]
    fn binary_matches_the_cpu_kernel() {
        let mut failed = Vec::new();
        for dtype in FLOATS.into_iter().chain(INTS) {
            for (s, &n) in SIZES.iter().enumerate() {
                for (layout, a, b) in pairs(n, 10 + s as u64, dtype) {
                    for op in binary_ops() {
                        let what = format!("{op:?} {dtype:?} {layout}");
                        let want = Cpu.binary("test", op, &a, &b);
                        let got = Cuda.binary("test", op, &a, &b);
                        match (got, want) {
                            (Ok(g), Ok(w)) => {
                                if let Some(m) = mismatch(&g, &w, op_tol(&what, dtype)) {
                                    failed.push(format!("{what}: {m}"));
                                }
                            }
                            (Err(_), Err(_)) => {}
                            (g, w) => failed.push(format!("{what}: emulated {g:?}, cpu {w:?}")),
                        }
                    }
                }
            }
        }
        report(failed);
    }

    #[test]
    fn compare_and_where_match_candle() {
        use candle_core::op::CmpOp;
        let ops = [
            CmpOp::Eq,
            CmpOp::Ne,
            CmpOp::Lt,
            CmpOp::Le,
            CmpOp::Gt,
            CmpOp::Ge,
        ];
        let mut failed = Vec::new();
        for dtype in FLOATS.into_iter().chain(INTS) {
            for (s, &n) in SIZES.iter().enumerate() {
                for (layout, a, b) in pairs(n, 30 + s as u64, dtype) {
                    for op in ops {
                        let what = format!("compare {} {dtype:?} {layout}", compare_code(op));
                        let want = Cpu.compare("test", op, &a, &b).unwrap();
                        let got = Cuda.compare("test", op, &a, &b).unwrap();
                        if let Some(m) = mismatch(&got, &want, (0.0, 0.0)) {
                            failed.push(format!("{what}: {m}"));
                        }
                    }
                    // a condition of a third layout: a's own comparison with 0
                    let zero = Tensor::zeros((), dtype, &Device::Cpu)
                        .and_then(|z| z.broadcast_as(a.shape()))
                        .unwrap();
                    let c = Cpu.compare("test", CmpOp::Gt, &a, &zero).unwrap();
                    let want = Cpu.select("test", &c, &a, &b).unwrap();
                    let got = Cuda.select("test", &c, &a, &b).unwrap();
                    if let Some(m) = mismatch(&got, &want, (0.0, 0.0)) {
                        failed.push(format!("where {dtype:?} {layout}: {m}"));
                    }
                }
            }
        }
        report(failed);
        // operands of one buffer take one guard
        let x = tensor(12, 3, DType::F32).reshape((3, 4)).unwrap();
        let c = Cpu
            .compare("test", CmpOp::Gt, &x, &x.t().unwrap().t().unwrap())
            .unwrap();
        let got = Cuda.select("test", &c, &x, &x).unwrap();
        same("where(c, x, x)", &got, &x, (0.0, 0.0));
    }

    /// A transposed operand against one whose rows are a broadcast scalar column: the two
    /// tables' walks share the dims.
    #[test]
    fn binary_walks_two_different_strides() {
        let a = tensor(1000, 1, DType::F32)
            .reshape((25, 40))
            .unwrap()
            .t()
            .unwrap();
        let b = tensor(40, 2, DType::F32)
            .reshape((40, 1))
            .unwrap()
            .broadcast_as((40, 25))
            .unwrap();
        for op in [Bin::Sub, Bin::Rem, Bin::Atan2] {
            let got = Cuda.binary("test", op, &a, &b).unwrap();
            let want = Cpu.binary("test", op, &a, &b).unwrap();
            same(&format!("{op:?}"), &got, &want, tol(DType::F32));
        }
    }

    #[test]
    fn python_division_and_powers_on_integers() {
        let a = Tensor::new(&[-7i64, 7, -7, 7, i64::MIN, 5, 0, -3, 2, -1], &Device::Cpu).unwrap();
        let b = Tensor::new(&[2i64, -2, -2, 2, -1, 0, 3, -1, -1, -3], &Device::Cpu).unwrap();
        let run = |op| {
            Cuda.binary("test", op, &a, &b)
                .unwrap()
                .to_vec1::<i64>()
                .unwrap()
        };
        assert_eq!(run(Bin::FloorDiv), [-4, -4, 3, 3, i64::MIN, 0, 0, 3, -2, 0]);
        assert_eq!(run(Bin::Rem), [1, -1, -1, 1, 0, 0, 0, 0, 0, -1]);
        assert_eq!(run(Bin::TruncDiv), [-3, -3, 3, 3, i64::MIN, 0, 0, 3, -2, 0]);
        assert_eq!(run(Bin::Fmod), [-1, 1, -1, 1, 0, 0, 0, 0, 0, -1]);
        assert_eq!(run(Bin::Pow), [49, 0, 0, 49, 0, 1, 0, 0, 0, -1]);
    }

    #[test]
    fn predicates_match_the_cpu_kernel() {
        for dtype in FLOATS {
            for (s, &n) in SIZES.iter().enumerate() {
                for (layout, x) in layouts(n, s as u64, dtype) {
                    for p in [Pred::IsNan, Pred::IsInf, Pred::IsFinite] {
                        let what = format!("{p:?} {dtype:?} {layout}");
                        let got = Cuda.predicate("test", p, &x).unwrap();
                        let want = Cpu.predicate("test", p, &x).unwrap();
                        same(&what, &got, &want, (0.0, 0.0));
                    }
                }
            }
        }
        let i = tensor(5, 0, DType::I64);
        assert!(Cuda.predicate("test", Pred::IsNan, &i).is_err());
    }

    #[test]
    fn round_is_half_to_even_and_frac_keeps_the_sign() {
        let x = Tensor::new(&[0.5f32, 1.5, 2.5, -0.5, -2.5, -3.7, 3.7], &Device::Cpu).unwrap();
        let r = Cuda.unary("test", UnaryOp::Round, &x).unwrap();
        assert_eq!(
            r.to_vec1::<f32>().unwrap(),
            [0.0, 2.0, 2.0, -0.0, -2.0, -4.0, 4.0]
        );
        let f = Cuda.unary("test", UnaryOp::Frac, &x).unwrap();
        let want = [0.5f32, 0.5, 0.5, -0.5, -0.5, -0.7, 0.7];
        for (a, b) in f.to_vec1::<f32>().unwrap().iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "frac {a} vs {b}");
        }
    }
}
