//! The line kernels on CUDA (`kernels/lines.cu`): scans, max/min and their indices, prod,
//! softmax and the linear recurrence along any dim of a contiguous tensor, and the sum over
//! a block of dims, with the CPU kernels' semantics (`backend/cpu/lines.rs`).
//!
//! A launch is planned here ([`Plan`]): the shape of a team (the threads that share a line),
//! and whether lines too long and too few to fill the device are cut into chunks. Chunked
//! lines take a second launch over the chunks' results (a reduction) or three (a scan: each
//! chunk's total, the scan of the totals, each chunk's scan from its predecessors' total).

use crate::backend::cast::Convert;
use candle_core::{DType, Device, Tensor};

use super::launch::{addr, launch, Arg, Grid, Kernel};
use super::{dtype_suffix, intern, ptx, Cuda};
use crate::backend::{InplaceOps, LineKernel, Lines, ReduceOps};
use crate::error::{CandleContext, Error, Result};

/// Elements a thread scans per tile (`kItems` in lines.cu).
const SCAN_ITEMS: usize = 4;
/// Threads in a team at most: a line's reduction runs in one team unless it is chunked.
const TEAM_MAX: usize = 512;
/// Threads per block where teams are smaller than that.
const BLOCK: usize = 256;
/// Roughly the threads that keep a large GPU busy: lines that give fewer are chunked.
const BUSY_THREADS: usize = 1 << 17;
/// Blocks of a launch at most; the kernels loop over the rest.
const MAX_BLOCKS: usize = 65535;

/// How one launch covers `outer × n × inner` lines: teams of `cw` columns × `r` slices,
/// `g` teams per block, each line cut into `chunks` chunks of `chunk_len`.
#[derive(Clone, Copy, Debug)]
struct Plan {
    lines: Lines,
    items: usize,
    cw: usize,
    r: usize,
    g: usize,
    chunk_len: usize,
    chunks: usize,
}

impl Plan {
    /// `items`: elements a thread takes per step; `split`: whether long lines may be chunked.
    fn new(lines: Lines, items: usize, split: bool) -> Plan {
        let Lines { outer, n, inner } = lines;
        let cw = inner.next_power_of_two().min(32);
        // At least 4 threads a team, so that a block holds at most 64 teams (blockDim.z).
        let r = n
            .div_ceil(items)
            .next_power_of_two()
            .min(TEAM_MAX / cw)
            .max(4usize.div_ceil(cw));
        let span = cw * r;
        let g = (BLOCK / span).max(1);
        let teams = outer * inner.div_ceil(cw);
        let tile = r * items;
        let target = (BUSY_THREADS / span).max(1);
        let (mut chunk_len, mut chunks) = (n, 1);
        if split && teams < target && n > 4 * tile {
            let c = n.div_ceil(4 * tile).min(target.div_ceil(teams));
            chunk_len = n.div_ceil(c).div_ceil(tile) * tile;
            chunks = n.div_ceil(chunk_len);
        }
        Plan {
            lines,
            items,
            cw,
            r,
            g,
            chunk_len,
            chunks,
        }
    }

    /// The second pass: the chunks' results as lines of `chunks` elements.
    fn over_chunks(&self) -> Plan {
        let l = self.lines;
        Plan::new(
            Lines {
                outer: l.outer,
                n: self.chunks,
                inner: l.inner,
            },
            self.items,
            false,
        )
    }

    fn grid(&self) -> Grid {
        let teams = self.lines.outer * self.lines.inner.div_ceil(self.cw) * self.chunks;
        Grid {
            blocks: (teams.div_ceil(self.g).clamp(1, MAX_BLOCKS) as u32, 1, 1),
            threads: (self.cw as u32, self.r as u32, self.g as u32),
            shared: 0,
        }
    }

    /// The kernels' first five arguments: outer, n, inner, chunk_len, chunks.
    fn args(&self) -> Vec<Arg> {
        let l = self.lines;
        [l.outer, l.n, l.inner, self.chunk_len, self.chunks]
            .into_iter()
            .map(|v| Arg::I64(v as i64))
            .collect()
    }

    /// The shape of a buffer of per-chunk results.
    fn chunk_shape(&self) -> (usize, usize, usize) {
        (self.lines.outer, self.chunks, self.lines.inner)
    }
}

/// `gs_line_<name>_<suffix>`.
fn kernel(name: &str, suffix: &str) -> Kernel {
    Kernel {
        module: &ptx::LINES,
        name: intern(format!("gs_line_{name}_{suffix}")),
    }
}

/// The pointer argument of an optional tensor (null without).
fn ptr(a: Option<&super::launch::Addr<'_>>) -> Arg {
    Arg::Ptr(a.map_or(0, |a| a.addr))
}

fn zeros(
    shape: impl Into<candle_core::Shape>,
    dtype: DType,
    dev: &Device,
    op: &'static str,
) -> Result<Tensor> {
    crate::device::zeros(shape, dtype, dev).op(op)
}

/// What sums and products of a dtype accumulate in (`LineAcc` in lines.cu).
fn acc_dtype(dtype: DType) -> DType {
    if dtype == DType::I64 {
        DType::I64
    } else {
        DType::F64
    }
}

/// Launch `plan` with its five line arguments, then `rest`.
fn run(dev: &Device, k: Kernel, plan: &Plan, rest: &[Arg]) -> Result<()> {
    let mut args = plan.args();
    args.extend_from_slice(rest);
    launch(dev, k, plan.grid(), &args)
}

/// The sum (or product) of each line into `out`, in the accumulator of `x`'s dtype.
fn fold(x: &Tensor, lines: Lines, prod: bool, out: &Tensor) -> Result<()> {
    let op = if prod { "prod" } else { "sum" };
    let dev = x.device();
    let s = dtype_suffix(x.dtype());
    let plan = Plan::new(lines, 1, true);
    let flag = Arg::I32(i32::from(prod));
    let (xa, oa) = (addr(x)?, addr(out)?);
    if plan.chunks == 1 {
        return run(
            dev,
            kernel("fold", &format!("{s}_{s}")),
            &plan,
            &[Arg::Ptr(xa.addr), Arg::Ptr(oa.addr), flag],
        );
    }
    let acc = acc_dtype(x.dtype());
    let a = dtype_suffix(acc);
    let part = zeros(plan.chunk_shape(), acc, dev, op)?;
    let pa = addr(&part)?;
    run(
        dev,
        kernel("fold", &format!("{s}_{a}")),
        &plan,
        &[Arg::Ptr(xa.addr), Arg::Ptr(pa.addr), flag],
    )?;
    run(
        dev,
        kernel("fold", &format!("{a}_{s}")),
        &plan.over_chunks(),
        &[Arg::Ptr(pa.addr), Arg::Ptr(oa.addr), flag],
    )
}

/// The largest (smallest) element of each line to `value` and its index to `index`.
fn extreme(
    x: &Tensor,
    lines: Lines,
    max: bool,
    value: Option<&Tensor>,
    index: Option<&Tensor>,
) -> Result<()> {
    let dev = x.device();
    let k = kernel("extreme", dtype_suffix(x.dtype()));
    let plan = Plan::new(lines, 1, true);
    let flag = Arg::I32(i32::from(max));
    let xa = addr(x)?;
    let va = value.map(addr).transpose()?;
    let ia = index.map(addr).transpose()?;
    if plan.chunks == 1 {
        return run(
            dev,
            k,
            &plan,
            &[
                Arg::Ptr(xa.addr),
                Arg::Ptr(0),
                ptr(va.as_ref()),
                ptr(ia.as_ref()),
                flag,
            ],
        );
    }
    let pv = zeros(plan.chunk_shape(), x.dtype(), dev, "max")?;
    let pi = zeros(plan.chunk_shape(), DType::I64, dev, "max")?;
    let (pva, pia) = (addr(&pv)?, addr(&pi)?);
    run(
        dev,
        k,
        &plan,
        &[
            Arg::Ptr(xa.addr),
            Arg::Ptr(0),
            Arg::Ptr(pva.addr),
            Arg::Ptr(pia.addr),
            flag,
        ],
    )?;
    run(
        dev,
        k,
        &plan.over_chunks(),
        &[
            Arg::Ptr(pva.addr),
            Arg::Ptr(pia.addr),
            ptr(va.as_ref()),
            ptr(ia.as_ref()),
            flag,
        ],
    )
}

/// Softmax (log-softmax) of each line into `out`.
fn softmax(x: &Tensor, lines: Lines, log: bool, out: &Tensor) -> Result<()> {
    let plan = Plan::new(lines, 1, false);
    let (xa, oa) = (addr(x)?, addr(out)?);
    let k = kernel("softmax", dtype_suffix(x.dtype()));
    run(
        x.device(),
        k,
        &plan,
        &[
            Arg::Ptr(xa.addr),
            Arg::Ptr(oa.addr),
            Arg::I32(i32::from(log)),
        ],
    )
}

/// A scan of each line into `out`: cumsum or cumprod of `x`, or, with `b`, the linear
/// recurrence `h = x h + b`.
fn scan(
    x: &Tensor,
    b: Option<&Tensor>,
    lines: Lines,
    prod: bool,
    reverse: bool,
    out: &Tensor,
) -> Result<()> {
    let op = if b.is_some() { "linear_scan" } else { "cumsum" };
    let dev = x.device();
    let s = dtype_suffix(x.dtype());
    let (name, tail) = match b {
        Some(_) => ("linear_scan", vec![]),
        None => ("scan", vec![Arg::I32(i32::from(prod))]),
    };
    let plan = Plan::new(lines, SCAN_ITEMS, true);
    let (xa, oa) = (addr(x)?, addr(out)?);
    let ba = b.map(addr).transpose()?;
    // (inputs, carry, out, totals) in the kernel's order, then prod (cumsum/cumprod), reverse.
    let pass =
        |plan: &Plan, k: Kernel, inputs: &[Arg], carry: Arg, y: Arg, totals: &[Arg], rev: bool| {
            let mut args = inputs.to_vec();
            args.extend([carry, y]);
            args.extend_from_slice(totals);
            args.extend_from_slice(&tail);
            args.push(Arg::I32(i32::from(rev)));
            run(dev, k, plan, &args)
        };
    let mut inputs = vec![Arg::Ptr(xa.addr)];
    if let Some(ba) = &ba {
        inputs.push(Arg::Ptr(ba.addr));
    }
    let null_totals: &[Arg] = if b.is_some() {
        &[Arg::Ptr(0), Arg::Ptr(0)]
    } else {
        &[Arg::Ptr(0)]
    };
    let k = kernel(name, s);
    if plan.chunks == 1 {
        return pass(
            &plan,
            k,
            &inputs,
            Arg::Ptr(0),
            Arg::Ptr(oa.addr),
            null_totals,
            reverse,
        );
    }
    // Each chunk's total (a sum, a product, or the map h -> A h + B as A and B)...
    let acc = acc_dtype(x.dtype());
    let ta = zeros(plan.chunk_shape(), acc, dev, op)?;
    let tb = b
        .map(|_| zeros(plan.chunk_shape(), acc, dev, op))
        .transpose()?;
    let (taa, tba) = (addr(&ta)?, tb.as_ref().map(addr).transpose()?);
    let mut totals = vec![Arg::Ptr(taa.addr)];
    if let Some(t) = &tba {
        totals.push(Arg::Ptr(t.addr));
    }
    pass(
        &plan,
        k,
        &inputs,
        Arg::Ptr(0),
        Arg::Ptr(0),
        &totals,
        reverse,
    )?;
    // ...scanned front to back in the accumulator's type (what h is after each chunk)...
    let pre = zeros(plan.chunk_shape(), acc, dev, op)?;
    let prea = addr(&pre)?;
    pass(
        &plan.over_chunks(),
        kernel(name, dtype_suffix(acc)),
        &totals,
        Arg::Ptr(0),
        Arg::Ptr(prea.addr),
        null_totals,
        false,
    )?;
    // ...then each chunk starts from its predecessors'.
    pass(
        &plan,
        k,
        &inputs,
        Arg::Ptr(prea.addr),
        Arg::Ptr(oa.addr),
        null_totals,
        reverse,
    )
}

/// The dtype a kernel takes, or the error naming it.
fn check_dtype(name: &str, dtype: DType, allowed: &[DType]) -> Result<()> {
    if allowed.contains(&dtype) {
        return Ok(());
    }
    Err(Error::dtype(format!(
        "{name}: unsupported dtype {dtype:?} (expected one of {allowed:?})"
    )))
}

impl ReduceOps for Cuda {
    fn lines(&self, x: &Tensor, dim: usize, k: LineKernel) -> Result<Tensor> {
        let name = k.name();
        let x = x.dense().op(name)?;
        let lines = Lines::new(x.dims(), dim);
        let mut dims = x.dims().to_vec();
        dims[dim] = k.out_len(lines.n);
        let floats = [DType::F32, DType::F64];
        let all = [DType::F32, DType::F64, DType::I64];
        match k {
            LineKernel::Softmax { .. } => check_dtype(name, x.dtype(), &floats)?,
            LineKernel::LinearScan { .. } => {
                return Err(Error::runtime(format!(
                    "{name}: a two-input kernel (lines2)"
                )))
            }
            _ => check_dtype(name, x.dtype(), &all)?,
        }
        let out_dtype = match k {
            LineKernel::ArgExtreme { .. } => DType::I64,
            _ => x.dtype(),
        };
        let dev = x.device();
        let out = zeros(dims, out_dtype, dev, name)?;
        if out.elem_count() == 0 {
            return Ok(out);
        }
        if lines.n == 0 {
            // Empty lines: the product's identity, zeros for the rest (as the CPU kernel).
            if matches!(k, LineKernel::Prod) {
                self.fill(name, &out, 1.0.into())?;
            }
            return Ok(out);
        }
        match k {
            LineKernel::Scan { prod, reverse } => scan(&x, None, lines, prod, reverse, &out)?,
            LineKernel::Extreme { max } => extreme(&x, lines, max, Some(&out), None)?,
            LineKernel::ArgExtreme { max } => extreme(&x, lines, max, None, Some(&out))?,
            LineKernel::Prod => fold(&x, lines, true, &out)?,
            LineKernel::Softmax { log } => softmax(&x, lines, log, &out)?,
            LineKernel::LinearScan { .. } => unreachable!("checked above"),
        }
        Ok(out)
    }

    fn lines2(&self, a: &Tensor, b: &Tensor, dim: usize, k: LineKernel) -> Result<Tensor> {
        let name = k.name();
        let LineKernel::LinearScan { reverse } = k else {
            return Err(Error::runtime(format!(
                "{name}: a one-input kernel (lines)"
            )));
        };
        if a.dims() != b.dims() || a.dtype() != b.dtype() {
            return Err(Error::shape(format!(
                "{name}: inputs differ: {:?} {:?} and {:?} {:?}",
                a.dims(),
                a.dtype(),
                b.dims(),
                b.dtype()
            )));
        }
        check_dtype(name, a.dtype(), &[DType::F32, DType::F64])?;
        let (a, b) = (a.dense().op(name)?, b.dense().op(name)?);
        let out = zeros(a.dims(), a.dtype(), a.device(), name)?;
        let lines = Lines::new(a.dims(), dim);
        if out.elem_count() > 0 {
            scan(&a, Some(&b), lines, false, reverse, &out)?;
        }
        Ok(out)
    }

    /// Every sum candle's CUDA build cannot do (int64 over any dims but the last, or over a
    /// strided input) and the float ones it does more slowly: one fold per run of
    /// adjacent dims, the last run first.
    fn block_sum(&self, x: &Tensor, reduced: &[usize]) -> Result<Option<Tensor>> {
        if reduced.is_empty()
            || x.elem_count() == 0
            || !matches!(x.dtype(), DType::F32 | DType::F64 | DType::I64)
        {
            return Ok(None);
        }
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for &d in reduced {
            match runs.last_mut() {
                Some((_, last)) if *last + 1 == d => *last = d,
                _ => runs.push((d, d)),
            }
        }
        let mut sum = x.dense().op("sum")?;
        for &(a, b) in runs.iter().rev() {
            let dims = sum.dims().to_vec();
            let lines = Lines {
                outer: dims[..a].iter().product(),
                n: dims[a..=b].iter().product(),
                inner: dims[b + 1..].iter().product(),
            };
            let kd: Vec<usize> = dims
                .iter()
                .enumerate()
                .map(|(i, &d)| if (a..=b).contains(&i) { 1 } else { d })
                .collect();
            let out = zeros(kd, x.dtype(), x.device(), "sum")?;
            fold(&sum, lines, false, &out)?;
            sum = out;
        }
        Ok(Some(sum))
    }
}

#[cfg(all(test, feature = "cuda-emulator"))]
mod tests {
    use candle_core::{DType, Device, Tensor};

    use super::super::testing::{assert_close, assert_same_bits, sample, tolerance};
    use super::{Cuda, Plan};
    use crate::backend::cpu::Cpu;
    use crate::backend::{LineKernel, Lines, ReduceOps};

    /// Shapes whose every dim is taken as the line's: rows of 1, 31, 33, 1000 and 5000
    /// elements, lines along outer dims with few and many columns, and lines long and few
    /// enough to be cut into chunks.
    const SHAPES: &[&[usize]] = &[
        &[1],
        &[31],
        &[33],
        &[1000],
        &[5000],
        &[3, 5, 4],
        &[2, 33, 3],
        &[7, 1000],
        &[1000, 3],
        &[4, 1, 6],
        &[64, 3, 40],
        &[2, 5000, 2],
        &[1, 20000, 3],
    ];

    fn kernels(dtype: DType) -> Vec<LineKernel> {
        let mut k = vec![
            LineKernel::Extreme { max: true },
            LineKernel::Extreme { max: false },
            LineKernel::ArgExtreme { max: true },
            LineKernel::ArgExtreme { max: false },
            LineKernel::Prod,
        ];
        for prod in [false, true] {
            for reverse in [false, true] {
                k.push(LineKernel::Scan { prod, reverse });
            }
        }
        if dtype != DType::I64 {
            k.push(LineKernel::Softmax { log: false });
            k.push(LineKernel::Softmax { log: true });
        }
        k
    }

    /// Inputs for a kernel: products of values near 1, so long lines stay finite; small
    /// integers, so that ties are common.
    fn input(dims: &[usize], dtype: DType, k: LineKernel, seed: u64) -> Tensor {
        let prod = matches!(k, LineKernel::Prod | LineKernel::Scan { prod: true, .. });
        match (dtype, prod) {
            (DType::I64, true) => sample(dims, dtype, seed, -1.0, 3.0),
            (DType::I64, false) => sample(dims, dtype, seed, -50.0, 50.0),
            (_, true) => sample(dims, dtype, seed, 0.99, 1.01),
            _ => sample(dims, dtype, seed, -4.0, 4.0),
        }
    }

    fn check(what: &str, x: &Tensor, dim: usize, k: LineKernel) {
        let a = Cuda.lines(x, dim, k).unwrap();
        let b = Cpu.lines(x, dim, k).unwrap();
        match k {
            LineKernel::Extreme { .. } | LineKernel::ArgExtreme { .. } => {
                assert_same_bits(what, &a, &b)
            }
            _ => {
                let (rtol, atol) = tolerance(x.dtype(), x.dims()[dim]);
                assert_close(what, &a, &b, rtol, atol)
            }
        }
    }

    #[test]
    fn every_kernel_dtype_and_dim_matches_the_cpu() {
        for dtype in [DType::F32, DType::F64, DType::I64] {
            for (s, dims) in SHAPES.iter().enumerate() {
                for dim in 0..dims.len() {
                    for (j, k) in kernels(dtype).into_iter().enumerate() {
                        let x = input(dims, dtype, k, (s * 100 + j) as u64);
                        check(
                            &format!("{} {dtype:?} {dims:?} dim {dim}", k.name()),
                            &x,
                            dim,
                            k,
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn long_lines_are_chunked_and_match() {
        // One line of 100k elements, and a few along an outer dim: both take the chunked
        // passes.
        let one = Plan::new(Lines::new(&[100_000], 0), super::SCAN_ITEMS, true);
        assert!(one.chunks > 1, "{one:?}");
        for (dims, dim) in [
            (&[100_000usize][..], 0),
            (&[30_000, 3][..], 0),
            (&[2, 40_000][..], 1),
        ] {
            for dtype in [DType::F32, DType::F64, DType::I64] {
                for (j, k) in kernels(dtype).into_iter().enumerate() {
                    let x = input(dims, dtype, k, j as u64);
                    check(&format!("{} {dtype:?} {dims:?}", k.name()), &x, dim, k);
                }
            }
        }
    }

    #[test]
    fn nan_inf_and_signed_zeros() {
        let v = [
            1.0,
            f64::NAN,
            3.0,
            f64::INFINITY,
            -0.0,
            0.0,
            f64::NEG_INFINITY,
            3.0,
            f64::NAN,
            -2.0,
        ];
        let mut cases: Vec<Vec<f64>> = vec![
            v.to_vec(),
            vec![-0.0, 0.0, -0.0],
            vec![0.0, -0.0],
            vec![f64::NEG_INFINITY; 5],
            vec![2.0, f64::INFINITY, 1.0],
            vec![f64::NAN; 3],
            vec![5.0, 5.0, 1.0, 5.0],
        ];
        // A NaN deep in a long line, and its maximum twice.
        let mut long: Vec<f64> = (0..5000).map(|i| (i % 97) as f64).collect();
        long[3000] = f64::NAN;
        cases.push(long.clone());
        long[3000] = 500.0;
        long[4000] = 500.0;
        cases.push(long);
        for (c, v) in cases.iter().enumerate() {
            for dtype in [DType::F32, DType::F64] {
                let n = v.len();
                let row = Tensor::from_vec(v.clone(), n, &Device::Cpu).unwrap();
                let row = row.to_dtype(dtype).unwrap();
                // The same line along the last dim and along an outer dim.
                let col = row.reshape((n, 1)).unwrap().repeat((1, 3)).unwrap();
                for (x, dim) in [(row.clone(), 0), (col.contiguous().unwrap(), 0)] {
                    for k in kernels(dtype) {
                        if matches!(k, LineKernel::Prod | LineKernel::Scan { .. }) {
                            continue;
                        }
                        check(&format!("{} {dtype:?} case {c}", k.name()), &x, dim, k);
                    }
                }
            }
        }
    }

    #[test]
    fn integer_scans_wrap() {
        let v = vec![i64::MAX, 1, 2, i64::MIN, -5, 3];
        let x = Tensor::from_vec(v, 6, &Device::Cpu).unwrap();
        for k in kernels(DType::I64) {
            check(k.name(), &x, 0, k);
        }
    }

    #[test]
    fn empty_lines_and_strided_inputs() {
        for k in kernels(DType::F32) {
            let x = Tensor::zeros((3, 0, 2), DType::F32, &Device::Cpu).unwrap();
            let a = Cuda.lines(&x, 1, k).unwrap();
            let b = Cpu.lines(&x, 1, k).unwrap();
            assert_eq!(a.dims(), b.dims(), "{}", k.name());
            assert_close(k.name(), &a, &b, 0.0, 0.0);
            // A transposed view is made dense first.
            let y = sample(&[6, 5], DType::F32, 3, -1.0, 1.0).t().unwrap();
            let a = Cuda.lines(&y, 1, k).unwrap();
            let b = Cpu.lines(&y.contiguous().unwrap(), 1, k).unwrap();
            assert_close(k.name(), &a, &b, 1e-6, 1e-6);
        }
    }

    #[test]
    fn linear_scans_match_the_cpu() {
        let mut shapes: Vec<&[usize]> = SHAPES.to_vec();
        shapes.extend([&[100_000usize][..], &[30_000, 3][..]]);
        for dtype in [DType::F32, DType::F64] {
            for (s, dims) in shapes.iter().enumerate() {
                for dim in 0..dims.len() {
                    for reverse in [false, true] {
                        let k = LineKernel::LinearScan { reverse };
                        let a = sample(dims, dtype, 2 * s as u64, 0.5, 1.0);
                        let b = sample(dims, dtype, 2 * s as u64 + 1, -1.0, 1.0);
                        let got = Cuda.lines2(&a, &b, dim, k).unwrap();
                        let want = Cpu.lines2(&a, &b, dim, k).unwrap();
                        let (rtol, atol) = tolerance(dtype, dims[dim]);
                        let what =
                            format!("linear_scan {dtype:?} {dims:?} dim {dim} rev {reverse}");
                        assert_close(&what, &got, &want, rtol, atol);
                    }
                }
            }
        }
    }

    #[test]
    fn block_sums_match_a_double_sum() {
        let cases: &[(&[usize], &[usize])] = &[
            (&[300, 200], &[0]),
            (&[300, 200], &[1]),
            (&[300, 200], &[0, 1]),
            (&[4, 31, 33], &[1]),
            (&[4, 31, 33], &[1, 2]),
            (&[4, 31, 33], &[0, 1]),
            (&[100_000], &[0]),
            (&[1, 1, 1], &[0, 1, 2]),
            (&[50_000, 3], &[0]),
        ];
        for dtype in [DType::F32, DType::F64] {
            for (i, (dims, reduced)) in cases.iter().enumerate() {
                let x = sample(dims, dtype, i as u64, -1.0, 1.0);
                let got = Cuda
                    .block_sum(&x, reduced)
                    .unwrap()
                    .expect("a block of dims");
                let want = x
                    .to_dtype(DType::F64)
                    .unwrap()
                    .sum_keepdim(reduced.to_vec())
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap();
                let n = reduced.iter().map(|&d| dims[d]).product();
                let (rtol, atol) = tolerance(dtype, n);
                assert_close(
                    &format!("sum {dtype:?} {dims:?} {reduced:?}"),
                    &got,
                    &want,
                    rtol,
                    atol,
                );
            }
        }
        // dims that are not one block, a strided input, and int64 (which candle's CUDA
        // build sums only over the last dims of a dense tensor)
        let x = sample(&[30, 20, 10], DType::F64, 1, -1.0, 1.0);
        let t = x.transpose(0, 2).unwrap();
        let i = sample(&[30, 20, 10], DType::I64, 2, -9.0, 9.0);
        let it = i.transpose(0, 1).unwrap();
        for (what, x, reduced) in [
            ("runs", &x, &[0usize, 2][..]),
            ("strided", &t, &[0, 1][..]),
            ("int64 runs", &i, &[0, 2][..]),
            ("int64 strided", &it, &[1][..]),
        ] {
            let got = Cuda.block_sum(x, reduced).unwrap().expect(what);
            let want = x.sum_keepdim(reduced.to_vec()).unwrap();
            // (int64 compares exactly)
            let (rtol, atol) = tolerance(DType::F64, 300);
            assert_close(what, &got, &want, rtol, atol);
        }
    }
}
