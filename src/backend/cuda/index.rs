//! Advanced indexing on CUDA (`kernels/index.cu`): `take` and `put` of the elements an
//! `IndexPlan` names, on any strided source or destination, one thread per element of the
//! indexing result; and the bounds check of index values as a device reduction.
//!
//! `put` with `accumulate` adds with atomics, so repeated positions all add: the hardware's
//! atomicAdd for f32, f64, i32, u32 and i64, a compare-and-swap loop on the enclosing
//! 32-bit word for u8, i16, f16 and bf16 (f16/bf16 use the hardware's add where the
//! architecture has one). Integer results are exact in any order; float sums over repeated
//! positions depend on the order the atomics land in (as PyTorch's non-deterministic
//! `index_put_`), exact where the partial sums are representable.

use crate::backend::cast::Convert;
use std::sync::Arc;

use candle_core::{DType, Tensor};

use super::inplace::{size_suffix, Walk};
use super::launch::{addr, launch, Arg, Grid, Kernel};
use super::{dtype_suffix, intern, ptx, Cuda};
use crate::backend::IndexOps;
use crate::error::{CandleContext, Error, Result};
use crate::ops::index::IndexPlan;

const THREADS: u32 = 256;

fn kernel(name: String) -> Kernel {
    Kernel {
        module: &ptx::INDEX,
        name: intern(name),
    }
}

/// A plan laid over one buffer's layout, as the kernels take it: the int64 table
/// `[outer dims, outer strides, inner dims, inner strides, indexed dims' strides]` on the
/// device, the coordinates, and the sizes of the result's three blocks.
struct Laid {
    table: Tensor,
    outer_rank: usize,
    inner_rank: usize,
    coords: Tensor,
    outer: usize,
    count: usize,
    inner: usize,
}

impl Laid {
    fn new(name: &'static str, plan: &IndexPlan, t: &Tensor) -> Result<Laid> {
        let l = t.layout();
        let (dims, strides) = (l.dims(), l.stride());
        if plan.adv_dims.iter().any(|&d| d >= dims.len()) {
            return Err(Error::index(format!(
                "{name}: the index names dims {:?} of a tensor of rank {}",
                plan.adv_dims,
                dims.len()
            )));
        }
        let rest: Vec<usize> = (0..dims.len())
            .filter(|d| !plan.adv_dims.contains(d))
            .collect();
        let (outer_dims, inner_dims) = rest.split_at(plan.bpos.min(rest.len()));
        let mut v: Vec<i64> = Vec::new();
        for block in [outer_dims, inner_dims] {
            v.extend(block.iter().map(|&d| dims[d] as i64));
            v.extend(block.iter().map(|&d| strides[d] as i64));
        }
        v.extend(plan.adv_dims.iter().map(|&d| strides[d] as i64));
        if v.is_empty() {
            v.push(0); // candle makes no empty device buffers
        }
        let n = v.len();
        let count = plan.count();
        let coords = plan.coords.dense().op(name)?;
        if coords.dtype() != DType::I64 || coords.elem_count() != plan.adv_dims.len() * count {
            return Err(Error::index(format!(
                "{name}: expected int64 coordinates ({}, {count}), got {:?} {:?}",
                plan.adv_dims.len(),
                coords.dtype(),
                coords.dims()
            )));
        }
        let size = |ds: &[usize]| ds.iter().map(|&d| dims[d]).product::<usize>();
        Ok(Laid {
            table: crate::device::from_vec(v, n, t.device()).op(name)?,
            outer_rank: outer_dims.len(),
            inner_rank: inner_dims.len(),
            coords,
            outer: size(outer_dims),
            count,
            inner: size(inner_dims),
        })
    }

    fn total(&self) -> usize {
        self.outer * self.count * self.inner
    }
}

impl IndexOps for Cuda {
    /// See `IndexOps::find_out_of_bounds`: one flag (the first offending position) read
    /// back, and the value there only when there is one.
    fn find_out_of_bounds(
        &self,
        name: &'static str,
        v: &Tensor,
        lo: i64,
        hi: i64,
        except: Option<i64>,
    ) -> Result<Option<i64>> {
        let n = v.elem_count();
        if n == 0 {
            return Ok(None);
        }
        if v.dtype() != DType::I64 {
            return Err(Error::dtype(format!(
                "{name}: expected int64 index values, got {:?}",
                v.dtype()
            )));
        }
        // [first offending position (all ones: none), its value].
        let out = crate::device::from_vec(vec![-1i64, 0], 2, v.device()).op(name)?;
        {
            let w = Walk::of(v)?;
            let (va, wt, oa) = (addr(v)?, w.addr()?, addr(&out)?);
            let [t, r] = w.args(&wt);
            let args = [
                Arg::I64(n as i64),
                Arg::Ptr(va.addr),
                t,
                r,
                Arg::I64(lo),
                Arg::I64(hi),
                Arg::I32(i32::from(except.is_some())),
                Arg::I64(except.unwrap_or(0)),
                Arg::Ptr(oa.addr),
            ];
            let find = kernel("gs_find_out_of_bounds".into());
            launch(v.device(), find, Grid::elementwise(n, THREADS), &args)?;
            let value = kernel("gs_out_of_bounds_value".into());
            let one = Grid::elementwise(1, 32);
            launch(
                v.device(),
                value,
                one,
                &[Arg::Ptr(va.addr), t, r, Arg::Ptr(oa.addr)],
            )?;
        }
        let why = "index bounds check";
        if crate::host::read_scalar::<i64>(why, &out)? < 0 {
            return Ok(None);
        }
        let value = out.narrow(0, 1, 1).op(name)?;
        Ok(Some(crate::host::read_scalar::<i64>(why, &value)?))
    }

    fn take(&self, name: &'static str, x: &Tensor, plan: &Arc<IndexPlan>) -> Result<Tensor> {
        let suffix = size_suffix(name, x.dtype())?;
        let laid = Laid::new(name, plan, x)?;
        let out = crate::device::zeros(plan.out_dims(), x.dtype(), x.device()).op(name)?;
        let n = laid.total();
        if n == 0 {
            return Ok(out);
        }
        {
            let (xa, oa) = (addr(x)?, addr(&out)?);
            let (ta, ca) = (addr(&laid.table)?, addr(&laid.coords)?);
            let mut args = vec![Arg::I64(n as i64), Arg::Ptr(xa.addr), Arg::Ptr(oa.addr)];
            args.extend(plan_args(&laid, ta.addr, ca.addr, plan));
            let k = kernel(format!("gs_take_{suffix}"));
            launch(x.device(), k, Grid::elementwise(n, THREADS), &args)?;
        }
        Ok(out)
    }

    fn put(
        &self,
        name: &'static str,
        dst: &Tensor,
        src: &Tensor,
        plan: &Arc<IndexPlan>,
        accumulate: bool,
    ) -> Result<()> {
        let dtype = dst.dtype();
        if src.dtype() != dtype {
            return Err(Error::dtype(format!(
                "{name}: dtypes differ ({dtype:?} vs {:?})",
                src.dtype()
            )));
        }
        let k = if accumulate {
            match dtype {
                DType::U8
                | DType::I16
                | DType::I32
                | DType::U32
                | DType::I64
                | DType::F16
                | DType::BF16
                | DType::F32
                | DType::F64 => format!("gs_put_add_{}", dtype_suffix(dtype)),
                other => return Err(Error::dtype(format!("{name}: unsupported dtype {other:?}"))),
            }
        } else {
            format!("gs_put_{}", size_suffix(name, dtype)?)
        };
        let laid = Laid::new(name, plan, dst)?;
        // As the CPU kernel: the result's elements in order, while the source has them.
        let n = laid.total().min(src.elem_count());
        if n == 0 {
            return Ok(());
        }
        let sw = Walk::of(src)?;
        let (da, sa, st) = (addr(dst)?, addr(src)?, sw.addr()?);
        let (ta, ca) = (addr(&laid.table)?, addr(&laid.coords)?);
        let mut args = vec![Arg::I64(n as i64), Arg::Ptr(da.addr)];
        args.extend(plan_args(&laid, ta.addr, ca.addr, plan));
        args.push(Arg::Ptr(sa.addr));
        args.extend(sw.args(&st));
        launch(
            dst.device(),
            kernel(k),
            Grid::elementwise(n, THREADS),
            &args,
        )
    }
}

/// The plan's kernel arguments: table, outer rank, inner rank, k, coords, count, inner.
fn plan_args(laid: &Laid, table: u64, coords: u64, plan: &IndexPlan) -> [Arg; 7] {
    [
        Arg::Ptr(table),
        Arg::I32(laid.outer_rank as i32),
        Arg::I32(laid.inner_rank as i32),
        Arg::I32(plan.adv_dims.len() as i32),
        Arg::Ptr(coords),
        Arg::I64(laid.count as i64),
        Arg::I64(laid.inner as i64),
    ]
}

#[cfg(all(test, feature = "cuda-emulator"))]
mod tests {
    use std::sync::Arc;

    use candle_core::{DType, Device, Tensor};

    use super::super::testing::{flat, integers, same};
    use super::Cuda;
    use crate::backend::cpu::Cpu;
    use crate::backend::IndexOps;
    use crate::ops::index::IndexPlan;

    const DTYPES: [DType; 9] = [
        DType::U8,
        DType::I16,
        DType::U32,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    /// A plan over a source of `src_dims`: index arrays at `adv_dims`, of shape `bshape`,
    /// placed at `bpos`, with coordinates `rows[j]` along `adv_dims[j]`.
    fn plan(
        src_dims: &[usize],
        adv_dims: &[usize],
        bshape: &[usize],
        bpos: usize,
        rows: &[Vec<i64>],
    ) -> Arc<IndexPlan> {
        let count: usize = bshape.iter().product();
        let flat: Vec<i64> = rows.concat();
        assert_eq!(flat.len(), adv_dims.len() * count);
        Arc::new(IndexPlan {
            adv_dims: adv_dims.to_vec(),
            coords: crate::device::from_vec(flat, (adv_dims.len(), count), &Device::Cpu).unwrap(),
            bshape: bshape.to_vec(),
            bpos,
            src_dims: src_dims.to_vec(),
        })
    }

    /// Plans over a (4, 5, 6) source, `distinct` when no position repeats.
    fn plans() -> Vec<(&'static str, Arc<IndexPlan>, bool)> {
        let d = [4, 5, 6];
        vec![
            (
                "dim 1, repeated",
                plan(&d, &[1], &[7], 1, &[vec![4, 0, 2, 2, 4, 1, 2]]),
                false,
            ),
            (
                "dim 1, distinct",
                plan(&d, &[1], &[3], 1, &[vec![3, 0, 4]]),
                true,
            ),
            (
                "dims 0 and 2, first",
                plan(
                    &d,
                    &[0, 2],
                    &[2, 3],
                    0,
                    &[vec![3, 0, 1, 1, 2, 0], vec![5, 5, 0, 2, 2, 1]],
                ),
                true,
            ),
            (
                "dims 0 and 2, repeated",
                plan(
                    &d,
                    &[0, 2],
                    &[5],
                    0,
                    &[vec![1, 1, 3, 1, 0], vec![2, 2, 0, 2, 2]],
                ),
                false,
            ),
            (
                "dims 1 and 2, last",
                plan(&d, &[1, 2], &[4], 1, &[vec![0, 4, 4, 2], vec![5, 0, 5, 3]]),
                true,
            ),
            (
                "every dim",
                plan(
                    &d,
                    &[0, 1, 2],
                    &[6],
                    0,
                    &[
                        vec![0, 3, 3, 1, 0, 2],
                        vec![4, 0, 0, 1, 4, 2],
                        vec![5, 5, 5, 0, 5, 1],
                    ],
                ),
                false,
            ),
            ("dim 0, empty", plan(&d, &[0], &[0], 0, &[vec![]]), true),
            ("dim 2, one", plan(&d, &[2], &[1], 2, &[vec![3]]), true),
        ]
    }

    type View = fn(&Tensor) -> Tensor;

    /// (4, 5, 6) views of a (6, 7, 8) buffer: dense with an offset, permuted, narrowed.
    fn views() -> Vec<(&'static str, View)> {
        vec![
            ("dense", |b| {
                b.flatten_all()
                    .unwrap()
                    .narrow(0, 56, 120)
                    .unwrap()
                    .reshape((4, 5, 6))
                    .unwrap()
            }),
            ("narrowed", |b| {
                b.narrow(0, 2, 4)
                    .unwrap()
                    .narrow(1, 1, 5)
                    .unwrap()
                    .narrow(2, 2, 6)
                    .unwrap()
            }),
            ("permuted", |b| {
                b.permute((2, 0, 1))
                    .unwrap()
                    .narrow(0, 1, 4)
                    .unwrap()
                    .narrow(1, 0, 5)
                    .unwrap()
                    .narrow(2, 1, 6)
                    .unwrap()
            }),
        ]
    }

    fn covered(view: View) -> Vec<usize> {
        let ids = Tensor::arange(0f64, 336.0, &Device::Cpu)
            .unwrap()
            .reshape((6, 7, 8))
            .unwrap();
        flat(&view(&ids)).into_iter().map(|v| v as usize).collect()
    }

    #[test]
    fn take_matches_the_cpu_kernel() {
        for dtype in DTYPES {
            let base = integers(&[6, 7, 8], 1, 0, 100, dtype);
            for (vname, view) in views() {
                let x = view(&base);
                assert_eq!(x.dims(), &[4, 5, 6]);
                for (pname, p, _) in plans() {
                    let a = Cuda.take("t", &x, &p).unwrap();
                    let b = Cpu.take("t", &x, &p).unwrap();
                    assert_eq!(a.dims(), p.out_dims().as_slice());
                    same(&format!("{dtype:?} take {pname} of {vname}"), &a, &b);
                }
            }
        }
    }

    #[test]
    fn put_matches_the_cpu_kernel() {
        for dtype in DTYPES {
            let base = integers(&[6, 7, 8], 1, 0, 20, dtype);
            for (vname, view) in views() {
                let inside = covered(view);
                for (pname, p, distinct) in plans() {
                    let dims = p.out_dims();
                    let dense = integers(&dims, 2, 0, 20, dtype);
                    // The same values through a strided layout.
                    let rev: Vec<usize> = dims.iter().rev().copied().collect();
                    let order: Vec<usize> = (0..dims.len()).rev().collect();
                    let strided = dense.permute(order.clone()).unwrap().contiguous().unwrap();
                    let strided = strided.reshape(rev).unwrap().permute(order).unwrap();
                    same("strided source", &strided, &dense);
                    for (sname, src) in [("dense", &dense), ("strided", &strided)] {
                        // Assign only where no position repeats (which write wins is open).
                        for accumulate in [true, false] {
                            if !accumulate && !distinct {
                                continue;
                            }
                            let what = format!("{dtype:?} put {pname} into {vname} from {sname}, accumulate {accumulate}");
                            let (a, b) = (base.copy().unwrap(), base.copy().unwrap());
                            Cuda.put("t", &view(&a), src, &p, accumulate).unwrap();
                            Cpu.put("t", &view(&b), src, &p, accumulate).unwrap();
                            same(&what, &a, &b);
                            let (before, after) = (flat(&base), flat(&a));
                            for (i, (x, y)) in before.iter().zip(&after).enumerate() {
                                assert!(
                                    inside.contains(&i) || x == y,
                                    "{what}: element {i} outside the view changed"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    // Many writes to one position: every one must land (the atomics, the CAS on the word
    // shared by neighbouring 1- and 2-byte elements).
    #[test]
    fn accumulate_into_few_positions() {
        for dtype in DTYPES {
            let n = 1000;
            let coords: Vec<i64> = (0..n).map(|i| (i % 3) as i64).collect();
            let p = plan(&[4], &[0], &[n], 0, &[coords]);
            let dst = Tensor::zeros(4, dtype, &Device::Cpu).unwrap();
            let ones = Tensor::ones(n, dtype, &Device::Cpu).unwrap();
            let (a, b) = (dst.copy().unwrap(), dst.copy().unwrap());
            Cuda.put("t", &a, &ones, &p, true).unwrap();
            Cpu.put("t", &b, &ones, &p, true).unwrap();
            // u8 wraps at 256 on both; f16/bf16 round as each add does.
            same(&format!("{dtype:?} accumulate"), &a, &b);
        }
    }

    #[test]
    fn out_of_bounds_values_are_found_in_order() {
        let v = crate::device::from_vec(
            vec![0i64, 5, -1, 3, 9, 2, -7, 4, 1, 8, 6, 0],
            (3, 4),
            &Device::Cpu,
        )
        .unwrap();
        let t = v.t().unwrap(); // row-major order differs from memory order
        for x in [&v, &t] {
            for (lo, hi, except) in [
                (0, 10, None),
                (0, 9, None),
                (-1, 9, Some(9)),
                (-10, 10, None),
                (0, 5, Some(-1)),
                (2, 3, None),
            ] {
                assert_eq!(
                    Cuda.find_out_of_bounds("t", x, lo, hi, except).unwrap(),
                    Cpu.find_out_of_bounds("t", x, lo, hi, except).unwrap(),
                    "{lo}..{hi} except {except:?}"
                );
            }
        }
        assert_eq!(
            Cuda.find_out_of_bounds("t", &t, 0, 10, None).unwrap(),
            Some(-1)
        );
        let big: Vec<i64> = (0..5000)
            .map(|i| if i == 4321 || i == 4999 { 77 } else { i % 50 })
            .collect();
        let big = crate::device::from_vec(big, 5000, &Device::Cpu).unwrap();
        assert_eq!(
            Cuda.find_out_of_bounds("t", &big, 0, 50, None).unwrap(),
            Some(77)
        );
        let empty = Tensor::zeros(0, DType::I64, &Device::Cpu).unwrap();
        assert_eq!(
            Cuda.find_out_of_bounds("t", &empty, 0, 1, None).unwrap(),
            None
        );
    }
}
