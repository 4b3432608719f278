//! In-place writes on CUDA (`kernels/inplace.cu`): `dst op= src` on any non-overlapping
//! view with `src` broadcast and strided, `fill_` on any view, and a dense copy of any
//! layout. Each thread finds its element through the operands' layout tables (a dense
//! operand needs none). Moving elements is per element size; arithmetic per dtype.

use candle_core::{DType, Tensor, WithDType};

use super::launch::{addr, launch, layout_table, Addr, Arg, Grid, Kernel};
use super::{dtype_suffix, intern, ptx, Cuda};
use crate::backend::{InplaceOps, Update};
use crate::error::{CandleContext, Error, Result};
use crate::scalar::Scalar;

const THREADS: u32 = 256;

/// How a kernel walks an operand: its layout table and rank, or none when it is dense (so
/// element `i` is at `i`).
pub(super) struct Walk {
    table: Option<Tensor>,
    rank: i32,
}

impl Walk {
    pub(super) fn of(t: &Tensor) -> Result<Walk> {
        if t.is_contiguous() {
            return Ok(Walk {
                table: None,
                rank: 0,
            });
        }
        let (table, rank) = layout_table(t)?;
        Ok(Walk {
            table: Some(table),
            rank,
        })
    }

    /// The table's address (null when dense), held while a launch reads it.
    pub(super) fn addr(&self) -> Result<Option<Addr<'_>>> {
        self.table.as_ref().map(addr).transpose()
    }

    /// The kernel arguments `(table, rank)` for the address from [`Walk::addr`].
    pub(super) fn args(&self, a: &Option<Addr<'_>>) -> [Arg; 2] {
        [
            Arg::Ptr(a.as_ref().map_or(0, |a| a.addr)),
            Arg::I32(self.rank),
        ]
    }
}

/// The suffix of the kernels that move elements of `dtype` without looking at them.
pub(super) fn size_suffix(name: &str, dtype: DType) -> Result<&'static str> {
    match dtype.size_in_bytes() {
        1 => Ok("b1"),
        2 => Ok("b2"),
        4 => Ok("b4"),
        8 => Ok("b8"),
        _ => Err(Error::dtype(format!("{name}: unsupported dtype {dtype:?}"))),
    }
}

fn kernel(name: String) -> Kernel {
    Kernel {
        module: &ptx::INPLACE,
        name: intern(name),
    }
}

/// `v` in `dtype` (as the CPU kernel's: int64 exact, else `from_f64` of the f64), as bits.
fn fill_bits(name: &str, dtype: DType, s: Scalar) -> Result<i64> {
    let v = s.as_f64();
    Ok(match dtype {
        // integers wrap into narrower ones, as the CPU kernel's
        DType::U8 if matches!(s, Scalar::Int(_)) => s.as_i64() as u8 as i64,
        DType::I32 if matches!(s, Scalar::Int(_)) => s.as_i64() as i32 as u32 as i64,
        DType::U8 => u8::from_f64(v) as i64,
        DType::U32 => u32::from_f64(v) as i64,
        DType::I16 => i16::from_f64(v) as u16 as i64,
        DType::I32 => i32::from_f64(v) as u32 as i64,
        DType::I64 => s.as_i64(),
        DType::F16 => half::f16::from_f64(v).to_bits() as i64,
        DType::BF16 => half::bf16::from_f64(v).to_bits() as i64,
        DType::F32 => f32::from_f64(v).to_bits() as i64,
        DType::F64 => v.to_bits() as i64,
        other => return Err(Error::dtype(format!("{name}: unsupported dtype {other:?}"))),
    })
}

impl InplaceOps for Cuda {
    fn update(&self, name: &'static str, dst: &Tensor, src: &Tensor, u: Update) -> Result<()> {
        let dtype = dst.dtype();
        if src.dtype() != dtype {
            return Err(Error::dtype(format!(
                "{name}: in-place update: dtypes differ ({dtype:?} vs {:?})",
                src.dtype()
            )));
        }
        let arith = |op: &str| -> Result<String> {
            let float = matches!(dtype, DType::F16 | DType::BF16 | DType::F32 | DType::F64);
            let int = matches!(dtype, DType::U8 | DType::I32 | DType::I64);
            if float || (int && op != "div") {
                Ok(format!("gs_{op}_{}", dtype_suffix(dtype)))
            } else {
                Err(Error::dtype(format!(
                    "{name}: in-place {op} of {dtype:?} is not supported"
                )))
            }
        };
        let k = match u {
            Update::Assign => format!("gs_assign_{}", size_suffix(name, dtype)?),
            Update::Add => arith("add")?,
            Update::Sub => arith("sub")?,
            Update::Mul => arith("mul")?,
            Update::Div => arith("div")?,
        };
        let src = src.broadcast_as(dst.shape()).op(name)?;
        let n = dst.elem_count();
        if n == 0 {
            return Ok(());
        }
        let (dw, sw) = (Walk::of(dst)?, Walk::of(&src)?);
        let (da, sa) = (addr(dst)?, addr(&src)?);
        let (dt, st) = (dw.addr()?, sw.addr()?);
        let mut args = vec![Arg::I64(n as i64), Arg::Ptr(da.addr)];
        args.extend(dw.args(&dt));
        args.push(Arg::Ptr(sa.addr));
        args.extend(sw.args(&st));
        launch(
            dst.device(),
            kernel(k),
            Grid::elementwise(n, THREADS),
            &args,
        )
    }

    fn fill(&self, name: &'static str, dst: &Tensor, v: Scalar) -> Result<()> {
        let dtype = dst.dtype();
        let (suffix, bits) = (size_suffix(name, dtype)?, fill_bits(name, dtype, v)?);
        let n = dst.elem_count();
        if n == 0 {
            return Ok(());
        }
        let dw = Walk::of(dst)?;
        let (da, dt) = (addr(dst)?, dw.addr()?);
        let mut args = vec![Arg::I64(n as i64), Arg::Ptr(da.addr)];
        args.extend(dw.args(&dt));
        args.push(Arg::I64(bits));
        let k = kernel(format!("gs_fill_{suffix}"));
        launch(dst.device(), k, Grid::elementwise(n, THREADS), &args)
    }

    fn dense_copy(&self, name: &'static str, x: &Tensor) -> Result<Tensor> {
        let suffix = size_suffix(name, x.dtype())?;
        let out = crate::device::zeros(x.shape(), x.dtype(), x.device()).op(name)?;
        let n = x.elem_count();
        if n == 0 {
            return Ok(out);
        }
        {
            let xw = Walk::of(x)?;
            let (xa, xt, oa) = (addr(x)?, xw.addr()?, addr(&out)?);
            let mut args = vec![Arg::I64(n as i64), Arg::Ptr(xa.addr)];
            args.extend(xw.args(&xt));
            args.push(Arg::Ptr(oa.addr));
            let k = kernel(format!("gs_dense_copy_{suffix}"));
            launch(x.device(), k, Grid::elementwise(n, THREADS), &args)?;
        }
        Ok(out)
    }
}

#[cfg(all(test, feature = "cuda-emulator"))]
mod tests {
    use crate::scalar::Scalar;
    use candle_core::{DType, Device, Tensor};

    use super::super::testing::{flat, integers, same, tensor};
    use super::Cuda;
    use crate::backend::cpu::Cpu;
    use crate::backend::{InplaceOps, Update};

    const DTYPES: [DType; 7] = [
        DType::U8,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    fn is_float(d: DType) -> bool {
        matches!(d, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// Values for `dtype`: small integers (products stay in range), or floats.
    fn sample(dims: &[usize], seed: u64, dtype: DType) -> Tensor {
        if is_float(dtype) {
            tensor(dims, seed, -2.0, 2.0, dtype)
        } else {
            integers(dims, seed, 0, 10, dtype)
        }
    }

    type View = fn(&Tensor) -> Tensor;

    /// Views of a (6, 8) buffer: the whole, transposed, stepped rows and columns, narrowed
    /// (dense with an offset, and strided), and a single element.
    fn views() -> Vec<(&'static str, View)> {
        vec![
            ("whole", |b| b.clone()),
            ("transposed", |b| b.t().unwrap()),
            ("every other row", |b| {
                b.reshape((3, 2, 8))
                    .unwrap()
                    .narrow(1, 1, 1)
                    .unwrap()
                    .squeeze(1)
                    .unwrap()
            }),
            ("every other column, transposed", |b| {
                let v = b.reshape((6, 4, 2)).unwrap().narrow(2, 0, 1).unwrap();
                v.squeeze(2).unwrap().t().unwrap()
            }),
            ("dense rows with an offset", |b| b.narrow(0, 2, 3).unwrap()),
            ("narrowed block", |b| {
                b.narrow(0, 1, 4).unwrap().narrow(1, 2, 5).unwrap()
            }),
            ("one element", |b| {
                b.narrow(0, 3, 1).unwrap().narrow(1, 5, 1).unwrap()
            }),
            ("empty", |b| b.narrow(0, 2, 0).unwrap()),
            ("rank 3", |b| {
                b.reshape((2, 3, 8))
                    .unwrap()
                    .permute((2, 0, 1))
                    .unwrap()
                    .narrow(0, 1, 5)
                    .unwrap()
            }),
        ]
    }

    /// The buffer offsets (of a dense (6, 8) buffer) a view covers.
    fn covered(view: View) -> Vec<usize> {
        let ids = Tensor::arange(0f64, 48.0, &Device::Cpu)
            .unwrap()
            .reshape((6, 8))
            .unwrap();
        flat(&view(&ids)).into_iter().map(|v| v as usize).collect()
    }

    /// `f` run on a view of a fresh copy of `base` by the emulated kernel and by the CPU
    /// kernel: the two buffers must agree, and elements outside the view keep their value.
    fn check(what: &str, base: &Tensor, view: View, f: impl Fn(&dyn InplaceOps, &Tensor)) {
        let (a, b) = (base.copy().unwrap(), base.copy().unwrap());
        f(&Cuda, &view(&a));
        f(&Cpu, &view(&b));
        same(what, &a, &b);
        let inside = covered(view);
        let (before, after) = (flat(base), flat(&a));
        for (i, (x, y)) in before.iter().zip(&after).enumerate() {
            if !inside.contains(&i) {
                assert!(
                    x == y || (x.is_nan() && y.is_nan()),
                    "{what}: element {i} outside the view changed"
                );
            }
        }
    }

    #[test]
    fn update_matches_the_cpu_kernel() {
        let ops = [
            Update::Assign,
            Update::Add,
            Update::Sub,
            Update::Mul,
            Update::Div,
        ];
        for dtype in DTYPES {
            let base = sample(&[6, 8], 1, dtype);
            for (name, view) in views() {
                let dims = view(&base).dims().to_vec();
                let last = dims.last().copied().unwrap_or(1);
                // Sources: dense, broadcast along the leading dims, strided, 0-d.
                let dense = sample(&dims, 2, dtype);
                let row = sample(&[last], 3, dtype);
                let rev: Vec<usize> = dims.iter().rev().copied().collect();
                let strided = {
                    let t = sample(&rev, 4, dtype);
                    let n = rev.len();
                    let order: Vec<usize> = (0..n).rev().collect();
                    t.permute(order).unwrap()
                };
                let scalar = sample(&[], 5, dtype);
                let sources = [
                    ("dense", &dense),
                    ("row", &row),
                    ("strided", &strided),
                    ("0-d", &scalar),
                ];
                for u in ops {
                    if u == Update::Div && !is_float(dtype) {
                        let v = view(&base.copy().unwrap());
                        assert!(Cuda.update("t", &v, &dense, u).is_err() || v.elem_count() == 0);
                        continue;
                    }
                    for (sname, src) in sources {
                        let what = format!("{dtype:?} {u:?} into {name} from {sname}");
                        check(&what, &base, view, |be, d| {
                            be.update("t", d, src, u).unwrap()
                        });
                    }
                }
            }
        }
    }

    #[test]
    fn update_of_a_large_strided_destination() {
        // More elements than one block, not a multiple of it, transposed.
        let base = tensor(&[37, 61], 9, -1.0, 1.0, DType::F32);
        let src = tensor(&[61, 37], 10, -1.0, 1.0, DType::F32);
        let (a, b) = (base.copy().unwrap(), base.copy().unwrap());
        Cuda.update("t", &a.t().unwrap(), &src, Update::Add)
            .unwrap();
        Cpu.update("t", &b.t().unwrap(), &src, Update::Add).unwrap();
        same("large", &a, &b);
    }

    #[test]
    fn fill_matches_the_cpu_kernel() {
        for dtype in DTYPES {
            let base = sample(&[6, 8], 1, dtype);
            let fills: &[f64] = if is_float(dtype) {
                &[0.0, -1.5, 0.1, 1e-8, 65519.99, f64::INFINITY, f64::NAN]
            } else {
                &[0.0, 1.0, 7.0]
            };
            for (name, view) in views() {
                for &v in fills {
                    let what = format!("{dtype:?} fill {v} into {name}");
                    check(&what, &base, view, |be, d| {
                        be.fill("t", d, v.into()).unwrap()
                    });
                }
            }
        }
        // Negative integers and 64-bit values keep every bit, past 2**53 too.
        let wide = [
            (DType::I32, Scalar::Int(-7)),
            (DType::I64, Scalar::Int(-(1i64 << 40))),
            (DType::I64, Scalar::Int((1i64 << 53) + 1)),
            (DType::U8, Scalar::Int(-1)),
            (DType::I32, Scalar::Int(1i64 << 40)),
        ];
        for (dtype, v) in wide {
            let base = sample(&[6, 8], 2, dtype);
            check(&format!("{v:?}"), &base, views()[1].1, |be, d| {
                be.fill("t", d, v).unwrap()
            });
        }
        let s = Tensor::new(3f32, &Device::Cpu).unwrap();
        Cuda.fill("t", &s, 2.5.into()).unwrap();
        assert_eq!(s.to_scalar::<f32>().unwrap(), 2.5);
    }

    #[test]
    fn dense_copy_matches_the_cpu_kernel() {
        for dtype in DTYPES {
            let base = sample(&[6, 8], 1, dtype);
            for (name, view) in views() {
                let x = view(&base);
                let a = Cuda.dense_copy("t", &x).unwrap();
                let b = Cpu.dense_copy("t", &x).unwrap();
                assert!(a.is_contiguous());
                assert_eq!(a.dims(), x.dims());
                same(&format!("{dtype:?} copy of {name}"), &a, &b);
                // A copy, not a view: writing it leaves the source alone.
                if a.elem_count() > 0 {
                    Cuda.fill("t", &a, 1.0.into()).unwrap();
                    same("source kept", &view(&base), &b);
                }
            }
            let bc = sample(&[1, 5], 3, dtype).broadcast_as((4, 5)).unwrap();
            same(
                &format!("{dtype:?} copy of a broadcast"),
                &Cuda.dense_copy("t", &bc).unwrap(),
                &Cpu.dense_copy("t", &bc).unwrap(),
            );
            let s = sample(&[], 4, dtype);
            same("0-d", &Cuda.dense_copy("t", &s).unwrap(), &s);
        }
    }
}
