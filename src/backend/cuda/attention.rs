//! Scaled dot-product attention on CUDA (`kernels/attention.cu`), with the CPU kernels'
//! semantics (`backend/cpu/attention.rs`): a block per query row walks the keys with an
//! online softmax (forward); the backward recomputes the probabilities from q, k and the
//! log-sum-exp, in two launches: per query row D and dq, then per key row dk and dv. No L×S
//! matrix is stored, and no atomics are used.
//!
//! The operands are read in place: each kernel gets one int64 table of where every batch
//! item's rows start in each operand's storage, and the row strides.

use crate::backend::cast::Convert;
use candle_core::{DType, Device, Tensor};

use super::launch::{addr, launch, Addr, Arg, Grid, Kernel};
use super::{dtype_suffix, intern, ptx, Cuda};
use crate::backend::attention::{
    dropout_threshold, AttentionOps, AttnArgs, AttnGrads, AttnNeeds, AttnRows, AttnShape,
};
use crate::error::{CandleContext, Error, Result};

/// Threads per block at most (a tile of keys or queries), and at least (a warp).
const BLOCK: usize = 128;
const WARP: usize = 32;
/// Blocks of a launch at most; the kernels loop over the remaining rows.
const MAX_BLOCKS: usize = 65535;
/// Dynamic shared memory a launch may take without opting in; rows that do not fit with
/// the tiles are read from global memory instead ("staged" = 0).
const SHARED_MAX: usize = 48 * 1024;

fn kernel(name: &str, dtype: DType) -> Kernel {
    Kernel {
        module: &ptx::ATTENTION,
        name: intern(format!("gs_{name}_{}", dtype_suffix(dtype))),
    }
}

fn p(a: &Addr<'_>) -> Arg {
    Arg::Ptr(a.addr)
}

fn opt(a: &Option<Addr<'_>>) -> Arg {
    Arg::Ptr(a.as_ref().map_or(0, |a| a.addr))
}

fn i64_of(x: usize) -> Arg {
    Arg::I64(x as i64)
}

/// The compute dtype of the operands: f32 or f64, the same for all.
fn dtype_of(name: &'static str, q: &Tensor, others: &[&Tensor]) -> Result<DType> {
    let dt = q.dtype();
    if dt != DType::F32 && dt != DType::F64 {
        return Err(Error::dtype(format!(
            "{name}: the attention kernels take float32 or float64, got {dt:?}"
        )));
    }
    if let Some(t) = others.iter().find(|t| t.dtype() != dt) {
        return Err(Error::dtype(format!(
            "{name}: expected {dt:?} operands, got {:?}",
            t.dtype()
        )));
    }
    Ok(dt)
}

/// A launch's geometry: one block of `threads` per row (a tile of the other side), with
/// `tiles` tile arrays and, when they fit beside them, `staged` row vectors of `staged_len`
/// elements in all in dynamic shared memory.
fn grid(
    rows: usize,
    other: usize,
    s: AttnShape,
    tiles: usize,
    staged_len: usize,
    dt: DType,
) -> (Grid, i32) {
    let threads = other
        .max(s.e)
        .max(s.ev)
        .next_power_of_two()
        .clamp(WARP, BLOCK);
    let elem = dt.size_in_bytes();
    let tile_bytes = tiles * threads * elem;
    let staged_bytes = tile_bytes + staged_len * elem;
    let (shared, staged) = if staged_bytes <= SHARED_MAX {
        (staged_bytes, 1)
    } else {
        (tile_bytes, 0)
    };
    (
        Grid::rows(rows.min(MAX_BLOCKS), threads as u32, shared as u32),
        staged,
    )
}

/// The table of where each batch item's rows start, `[q, k, v, out, dout, mask]` × N, on
/// `dev`, relative to each operand's address (its layout's start; `AttnRows` count from
/// the storage's first element, the mask's from the mask's first element).
fn base_table(a: &AttnArgs<'_>, starts: [usize; 5], dev: &Device) -> Result<Tensor> {
    let n = a.shape.n;
    let mut v = Vec::with_capacity(6 * n);
    let rows = [a.q, a.k, a.v, a.out, a.dout];
    for (r, start) in rows.iter().zip(starts) {
        push_rows(&mut v, r, start, n);
    }
    match &a.mask {
        Some(m) => push_rows(
            &mut v,
            &AttnRows {
                base: m.base,
                row: m.row,
            },
            0,
            n,
        ),
        None => v.resize(6 * n, 0),
    }
    crate::device::from_vec(v, 6 * n, dev).op("attention")
}

/// `n` bases of `r` less `start` (0 for an operand the kernel does not read).
fn push_rows(v: &mut Vec<i64>, r: &AttnRows<'_>, start: usize, n: usize) {
    v.extend((0..n).map(|b| r.base.get(b).map_or(0, |&x| x as i64 - start as i64)));
}

fn start(t: &Tensor) -> usize {
    t.layout().start_offset()
}

/// Checks that the bases cover every batch item of the operands a kernel reads.
fn check_rows(name: &'static str, n: usize, rows: &[&AttnRows<'_>]) -> Result<()> {
    if rows.iter().any(|r| r.base.len() < n) {
        return Err(Error::shape(format!(
            "{name}: fewer row bases than batch items ({n})"
        )));
    }
    Ok(())
}

/// The arguments of the scores, after the operands (`GS_SCORE_PARAMS` in attention.cu).
fn score_args(a: &AttnArgs<'_>, mask: &Option<Addr<'_>>) -> [Arg; 9] {
    let (row, col) = a.mask.as_ref().map_or((0, 0), |m| (m.row, m.col));
    let (on, seed, threshold, keep) = match a.dropout {
        Some(d) => (1, d.seed, dropout_threshold(d.p), 1.0 / (1.0 - d.p)),
        None => (0, 0, 0, 1.0),
    };
    [
        opt(mask),
        i64_of(row),
        i64_of(col),
        Arg::I32(a.causal as i32),
        Arg::F64(a.scale),
        Arg::I32(on),
        Arg::I64(seed as i64),
        Arg::I64(threshold as i64),
        Arg::F64(keep),
    ]
}

fn shape_args(s: AttnShape) -> [Arg; 5] {
    [
        i64_of(s.n),
        i64_of(s.l),
        i64_of(s.s),
        i64_of(s.e),
        i64_of(s.ev),
    ]
}

/// The mask in the dtype of the operands, contiguous (its bases count from its start).
fn mask_of(name: &'static str, a: &AttnArgs<'_>, dt: DType) -> Result<Option<Tensor>> {
    let Some(m) = a.mask.as_ref() else {
        return Ok(None);
    };
    if m.data.dtype() != dt {
        return Err(Error::dtype(format!(
            "{name}: expected a {dt:?} mask, got {:?}",
            m.data.dtype()
        )));
    }
    m.data.dense().op(name).map(Some)
}

fn zeros(dims: &[usize], dt: DType, dev: &Device, name: &'static str) -> Result<Tensor> {
    crate::device::zeros(dims, dt, dev).op(name)
}

impl AttentionOps for Cuda {
    fn flash_forward(
        &self,
        name: &'static str,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        a: &AttnArgs<'_>,
    ) -> Result<(Tensor, Tensor)> {
        let dt = dtype_of(name, q, &[k, v])?;
        let s = a.shape;
        let dev = q.device();
        let out = zeros(&[s.n, s.l, s.ev], dt, dev, name)?;
        // Rows with no keys (s = 0), or nothing to write (ev = 0, as the CPU kernel): -inf.
        if s.n * s.l == 0 || s.s == 0 || s.ev == 0 {
            let lse = zeros(&[s.n, s.l], dt, dev, name)?
                .affine(1.0, f64::NEG_INFINITY)
                .op(name)?;
            return Ok((out, lse));
        }
        let lse = zeros(&[s.n, s.l], dt, dev, name)?;
        check_rows(name, s.n, &[&a.q, &a.k, &a.v])?;
        let mask = mask_of(name, a, dt)?;
        let table = base_table(a, [start(q), start(k), start(v), 0, 0], dev)?;
        let (g, staged) = grid(s.n * s.l, s.s, s, 1, s.e, dt);
        let (qa, ka, va, ta) = (addr(q)?, addr(k)?, addr(v)?, addr(&table)?);
        let ma = mask.as_ref().map(addr).transpose()?;
        let (oa, la) = (addr(&out)?, addr(&lse)?);
        let mut args = shape_args(s).to_vec();
        args.extend([
            p(&ta),
            i64_of(a.q.row),
            i64_of(a.k.row),
            i64_of(a.v.row),
            p(&qa),
            p(&ka),
            p(&va),
        ]);
        args.extend(score_args(a, &ma));
        args.extend([Arg::I32(staged), p(&oa), p(&la)]);
        launch(dev, kernel("flash_forward", dt), g, &args)?;
        drop((qa, ka, va, ta, ma, oa, la));
        Ok((out, lse))
    }

    fn flash_backward(
        &self,
        name: &'static str,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        out: &Tensor,
        lse: &Tensor,
        dout: &Tensor,
        a: &AttnArgs<'_>,
        needs: AttnNeeds,
    ) -> Result<AttnGrads> {
        let dt = dtype_of(name, q, &[k, v, out, lse, dout])?;
        let s = a.shape;
        let dev = q.device();
        let grad = |on: bool, dims: &[usize]| on.then(|| zeros(dims, dt, dev, name)).transpose();
        let dq = grad(needs.q, &[s.n, s.l, s.e])?;
        let dk = grad(needs.k, &[s.n, s.s, s.e])?;
        let dv = grad(needs.v, &[s.n, s.s, s.ev])?;
        // Every gradient is a sum over both queries and keys: none without either.
        if s.n * s.l * s.s == 0 || !(needs.q || needs.k || needs.v) {
            return Ok((dq, dk, dv));
        }
        check_rows(name, s.n, &[&a.q, &a.k, &a.v, &a.out, &a.dout])?;
        let lse = lse.dense().op(name)?;
        let mask = mask_of(name, a, dt)?;
        let starts = [start(q), start(k), start(v), start(out), start(dout)];
        let table = base_table(a, starts, dev)?;
        let (qa, ka, va, ta) = (addr(q)?, addr(k)?, addr(v)?, addr(&table)?);
        let (la, ga) = (addr(&lse)?, addr(dout)?);
        let ma = mask.as_ref().map(addr).transpose()?;
        let rows = [i64_of(a.q.row), i64_of(a.k.row), i64_of(a.v.row)];
        // D = rowsum(dout ∘ out) per query row, for dq and dk.
        let dd = (needs.q || needs.k)
            .then(|| zeros(&[s.n * s.l], dt, dev, name))
            .transpose()?;
        if let Some(dd) = &dd {
            let (oa, da, dqa) = (addr(out)?, addr(dd)?, dq.as_ref().map(addr).transpose()?);
            let (g, staged) = grid(s.n * s.l, s.s, s, 1, s.e + s.ev, dt);
            let mut args = shape_args(s).to_vec();
            args.push(p(&ta));
            args.extend(rows);
            args.extend([
                i64_of(a.out.row),
                i64_of(a.dout.row),
                p(&qa),
                p(&ka),
                p(&va),
                p(&oa),
                p(&la),
                p(&ga),
            ]);
            args.extend(score_args(a, &ma));
            args.extend([Arg::I32(staged), p(&da), opt(&dqa)]);
            launch(dev, kernel("flash_backward_rows", dt), g, &args)?;
        }
        if needs.k || needs.v {
            let da = dd.as_ref().map(addr).transpose()?;
            let (dka, dva) = (
                dk.as_ref().map(addr).transpose()?,
                dv.as_ref().map(addr).transpose()?,
            );
            let (g, staged) = grid(s.n * s.s, s.l, s, 2, s.e + s.ev, dt);
            let mut args = shape_args(s).to_vec();
            args.push(p(&ta));
            args.extend(rows);
            args.extend([
                i64_of(a.dout.row),
                p(&qa),
                p(&ka),
                p(&va),
                p(&la),
                p(&ga),
                opt(&da),
            ]);
            args.extend(score_args(a, &ma));
            args.extend([Arg::I32(staged), opt(&dka), opt(&dva)]);
            launch(dev, kernel("flash_backward_keys", dt), g, &args)?;
        }
        drop((qa, ka, va, ta, la, ga, ma));
        Ok((dq, dk, dv))
    }
}

#[cfg(all(test, feature = "cuda-emulator"))]
mod tests {
    use candle_core::{DType, Device, Tensor};

    use super::super::testing::{assert_close, uniform};
    use super::Cuda;
    use crate::backend::attention::{
        AttentionOps, AttnArgs, AttnDropout, AttnMask, AttnNeeds, AttnRows, AttnShape,
    };
    use crate::backend::cpu::Cpu;

    /// How an operand lies in its storage.
    #[derive(Clone, Copy, Debug)]
    struct Layout {
        /// Batch items reading the same rows (a broadcast batch, grouped-query k/v heads).
        share: usize,
        /// Items interleaved along each row: heads of a (B, T, H, E) projection read as
        /// (B, H, T, E).
        heads: usize,
        /// Unused elements after each item's row.
        pad: usize,
        /// Elements before the first: the tensor's layout starts there.
        lead: usize,
    }

    const DENSE: Layout = Layout {
        share: 1,
        heads: 1,
        pad: 0,
        lead: 0,
    };
    const HEADS: Layout = Layout {
        share: 1,
        heads: 2,
        pad: 3,
        lead: 5,
    };

    /// A kernel operand: a storage and where each batch item's rows start.
    struct Operand {
        data: Tensor,
        base: Vec<usize>,
        row: usize,
    }

    impl Operand {
        /// `n` items of `rows` rows of `w` random elements laid out as `lay` says.
        fn new(n: usize, rows: usize, w: usize, lay: Layout, seed: u64, dt: DType) -> Self {
            let items = n.div_ceil(lay.share);
            let wp = w + lay.pad;
            let row = lay.heads * wp;
            let len = lay.lead + items.div_ceil(lay.heads) * rows * row;
            let data = crate::device::from_vec(uniform(len, seed, -1.0, 1.0), len, &Device::Cpu)
                .and_then(|t| t.to_dtype(dt))
                .and_then(|t| t.narrow(0, lay.lead, len - lay.lead))
                .unwrap();
            let base = (0..n)
                .map(|b| {
                    let d = b / lay.share;
                    // In range even where there are no rows (the CPU kernel slices there).
                    (lay.lead + (d / lay.heads) * rows * row + (d % lay.heads) * wp).min(len)
                })
                .collect();
            Operand { data, base, row }
        }

        /// A dense (N, L, W) tensor's rows, moved into a storage with a row stride of W + 2.
        fn padded(t: &Tensor) -> Self {
            let (n, l, w) = t.dims3().unwrap();
            let data = t.pad_with_zeros(2, 0, 2).unwrap().flatten_all().unwrap();
            let row = w + 2;
            Operand {
                data,
                base: (0..n).map(|b| b * l * row).collect(),
                row,
            }
        }

        fn rows(&self) -> AttnRows<'_> {
            AttnRows {
                base: &self.base,
                row: self.row,
            }
        }
    }

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Mask {
        None,
        /// One (L, S) mask per item; item 0's first query row is fully masked.
        Full,
        /// One (L, S) mask for all items (bases shared); its first row fully masked.
        Shared,
        /// One row of S per item for all its queries (row stride 0); item 0 fully masked.
        Keys,
    }

    struct MaskData {
        data: Tensor,
        base: Vec<usize>,
        row: usize,
    }

    fn mask(kind: Mask, s: AttnShape, seed: u64, dt: DType) -> Option<MaskData> {
        let (rows, row, per_item) = match kind {
            Mask::None => return None,
            Mask::Full => (s.l, s.s, s.l * s.s),
            Mask::Shared => (s.l, s.s, 0),
            Mask::Keys => (1, 0, s.s),
        };
        let items = if per_item == 0 { 1 } else { s.n };
        let len = items * rows * s.s;
        let mut v: Vec<f64> = uniform(len, seed, -2.0, 2.0)
            .into_iter()
            .map(|x| if x < -1.0 { f64::NEG_INFINITY } else { x })
            .collect();
        // The first row (of item 0) masks every key.
        v.iter_mut().take(s.s).for_each(|x| *x = f64::NEG_INFINITY);
        // Three leading elements: the mask's layout does not start at its storage's start.
        let lead = [0.5; 3].into_iter().chain(v).collect::<Vec<_>>();
        let data = crate::device::from_vec(lead, len + 3, &Device::Cpu)
            .and_then(|t| t.to_dtype(dt))
            .and_then(|t| t.narrow(0, 3, len))
            .unwrap();
        Some(MaskData {
            data,
            base: (0..s.n).map(|b| b * per_item).collect(),
            row,
        })
    }

    #[derive(Clone, Copy, Debug)]
    struct Case {
        shape: AttnShape,
        q: Layout,
        kv: Layout,
        mask: Mask,
        causal: bool,
        dropout: Option<f64>,
    }

    fn shape(n: usize, l: usize, s: usize, e: usize, ev: usize) -> AttnShape {
        AttnShape { n, l, s, e, ev }
    }

    const ALL: AttnNeeds = AttnNeeds {
        q: true,
        k: true,
        v: true,
    };

    /// Every combination of dq, dk, dv (none included).
    fn every_need() -> Vec<AttnNeeds> {
        (0..8)
            .map(|b| AttnNeeds {
                q: b & 1 != 0,
                k: b & 2 != 0,
                v: b & 4 != 0,
            })
            .collect()
    }

    /// (rtol, atol) for O(1) results of sums of `terms` O(1) products.
    fn tol(dt: DType, terms: usize) -> (f64, f64) {
        let n = terms.max(1) as f64;
        match dt {
            DType::F64 => (1e-12, 1e-15 * n),
            _ => (2e-5, 5e-7 * n),
        }
    }

    /// The kernels' arguments for `c` and its operands.
    fn args<'a>(
        c: &Case,
        [q, k, v]: [&'a Operand; 3],
        m: Option<&'a MaskData>,
        [out, dout]: [AttnRows<'a>; 2],
        seed: u64,
    ) -> AttnArgs<'a> {
        let s = c.shape;
        AttnArgs {
            shape: s,
            q: q.rows(),
            k: k.rows(),
            v: v.rows(),
            out,
            dout,
            mask: m.map(|m| AttnMask {
                data: &m.data,
                base: &m.base,
                row: m.row,
                col: 1,
            }),
            causal: c.causal,
            // As the op: inf without features.
            scale: 1.0 / (s.e as f64).sqrt(),
            dropout: c.dropout.map(|p| AttnDropout { p, seed }),
        }
    }

    /// The forward and, for each of `needs`, the backward of `c` in `dt`: the CUDA kernels
    /// (emulated) against the CPU's.
    fn check(c: &Case, dt: DType, needs: &[AttnNeeds], seed: u64) {
        let s = c.shape;
        let what = format!("{c:?} {dt:?}");
        let q = Operand::new(s.n, s.l, s.e, c.q, seed, dt);
        let k = Operand::new(s.n, s.s, s.e, c.kv, seed + 1, dt);
        let v = Operand::new(s.n, s.s, s.ev, c.kv, seed + 2, dt);
        let m = mask(c.mask, s, seed + 3, dt);
        let none = AttnRows { base: &[], row: 0 };
        let a = args(c, [&q, &k, &v], m.as_ref(), [none, none], seed ^ 0x5eed);
        let name = "scaled_dot_product_attention";
        let (out, lse) = Cuda
            .flash_forward(name, &q.data, &k.data, &v.data, &a)
            .unwrap();
        let (out_c, lse_c) = Cpu
            .flash_forward(name, &q.data, &k.data, &v.data, &a)
            .unwrap();
        let (rtol, atol) = tol(dt, s.s);
        assert_close(&format!("{what} out"), &out, &out_c, rtol, atol);
        assert_close(&format!("{what} lse"), &lse, &lse_c, rtol, atol);
        // The backward from the CPU's forward, its output read with a row stride.
        let o = Operand::padded(&out_c);
        let g = Operand::new(s.n, s.l, s.ev, HEADS, seed + 4, dt);
        let a = args(
            c,
            [&q, &k, &v],
            m.as_ref(),
            [o.rows(), g.rows()],
            seed ^ 0x5eed,
        );
        let (rtol, atol) = tol(dt, (s.l + s.s) * (s.e + s.ev));
        for &nd in needs {
            let run = |be: &dyn AttentionOps| {
                be.flash_backward(
                    name, &q.data, &k.data, &v.data, &o.data, &lse_c, &g.data, &a, nd,
                )
                .unwrap()
            };
            let (got, want) = (run(&Cuda), run(&Cpu));
            for (d, x, y) in [
                ("dq", got.0, want.0),
                ("dk", got.1, want.1),
                ("dv", got.2, want.2),
            ] {
                let what = format!("{what} {nd:?} {d}");
                assert_eq!(x.is_some(), y.is_some(), "{what}");
                if let (Some(x), Some(y)) = (x, y) {
                    assert_close(&what, &x, &y, rtol, atol);
                }
            }
        }
    }

    /// Every layout, mask, causal and dropout variant of each shape, in f32 and f64.
    fn variants(shapes: &[AttnShape], needs: &[AttnNeeds]) {
        let gqa = Layout { share: 2, ..DENSE };
        let layouts = [(DENSE, DENSE), (HEADS, HEADS), (DENSE, gqa)];
        let mut seed = 0;
        for dt in [DType::F32, DType::F64] {
            for &shape in shapes {
                // A batch broadcast over k and v: every item reads the same rows.
                let shared = Layout {
                    share: shape.n.max(1),
                    lead: 1,
                    ..DENSE
                };
                for (q, kv) in layouts.into_iter().chain([(HEADS, shared)]) {
                    for mask in [Mask::None, Mask::Full, Mask::Shared, Mask::Keys] {
                        for causal in [false, true] {
                            if causal && mask != Mask::None {
                                continue;
                            }
                            for dropout in [None, Some(0.3)] {
                                seed += 10;
                                let c = Case {
                                    shape,
                                    q,
                                    kv,
                                    mask,
                                    causal,
                                    dropout,
                                };
                                check(&c, dt, needs, seed);
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn small_sizes_match_the_cpu() {
        variants(
            &[
                shape(1, 1, 1, 1, 1),
                shape(3, 5, 7, 4, 6),
                shape(2, 4, 3, 8, 2),
            ],
            &every_need(),
        );
    }

    #[test]
    fn sizes_over_a_block_match_the_cpu() {
        let needs = [
            ALL,
            AttnNeeds {
                q: false,
                k: true,
                v: false,
            },
            AttnNeeds {
                q: false,
                k: false,
                v: true,
            },
        ];
        variants(&[shape(2, 70, 33, 9, 3), shape(4, 13, 130, 16, 16)], &needs);
    }

    /// More than 1024 keys, more than 1024 queries.
    #[test]
    fn long_rows_match_the_cpu() {
        let needs = [ALL];
        for dt in [DType::F32, DType::F64] {
            for (i, shape) in [shape(1, 3, 1100, 8, 5), shape(2, 1030, 3, 4, 4)]
                .into_iter()
                .enumerate()
            {
                for (mask, causal, dropout) in [
                    (Mask::None, false, None),
                    (Mask::Full, false, Some(0.2)),
                    (Mask::None, true, None),
                    (Mask::Keys, false, None),
                ] {
                    let c = Case {
                        shape,
                        q: HEADS,
                        kv: DENSE,
                        mask,
                        causal,
                        dropout,
                    };
                    check(&c, dt, &needs, 7 + i as u64);
                }
            }
        }
    }

    /// Rows too long for shared memory beside the tiles: read from global memory.
    #[test]
    fn wide_rows_match_the_cpu() {
        for (dt, shape) in [
            (DType::F64, shape(2, 3, 5, 7000, 3)),
            (DType::F32, shape(2, 3, 4, 5, 13000)),
        ] {
            for causal in [false, true] {
                let c = Case {
                    shape,
                    q: HEADS,
                    kv: DENSE,
                    mask: Mask::None,
                    causal,
                    dropout: Some(0.25),
                };
                check(&c, dt, &every_need(), 3);
            }
        }
    }

    /// No batch items, queries, keys or features: no launch, the CPU's zeros and -inf.
    #[test]
    fn empty_sizes_match_the_cpu() {
        for dt in [DType::F32, DType::F64] {
            for shape in [
                shape(0, 4, 4, 4, 4),
                shape(2, 0, 5, 4, 4),
                shape(2, 5, 0, 4, 4),
                shape(2, 3, 4, 0, 4),
                shape(2, 3, 4, 4, 0),
            ] {
                for (mask, causal) in [(Mask::None, false), (Mask::Full, false), (Mask::None, true)]
                {
                    let c = Case {
                        shape,
                        q: DENSE,
                        kv: DENSE,
                        mask,
                        causal,
                        dropout: Some(0.5),
                    };
                    check(&c, dt, &every_need(), 11);
                }
            }
        }
    }

    /// Dropout of every element: zero outputs and gradients of v, as on the CPU.
    #[test]
    fn dropping_everything_matches_the_cpu() {
        for dt in [DType::F32, DType::F64] {
            let c = Case {
                shape: shape(2, 6, 5, 3, 4),
                q: DENSE,
                kv: DENSE,
                mask: Mask::Full,
                causal: false,
                dropout: Some(1.0),
            };
            check(&c, dt, &every_need(), 5);
        }
    }
}
