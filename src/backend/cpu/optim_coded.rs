//! The fused update of a parameter whose state is coded in fewer bits (`backend::coded`):
//! per block, the state is decoded into a small float buffer, the rule of the dense kernel
//! updates parameter and state element by element, and the new state is coded back with
//! the block's new scale. No buffer the size of the parameter is made.
//!
//! Rank-1 coded state (4-bit second moments of matrices) needs the new row and column
//! maxima before any element can be coded, so it runs the rule twice: a first pass only
//! measures the new state's maxima, the second updates and codes with them.

use candle_core::backend::BackendStorage;
use candle_core::CpuStorage;
use rayon::prelude::*;

use super::optim::{nest, walk, with_ref, with_rule, Buf, Elem, Rule, Walker};
use super::PAR_MIN;
use crate::backend::coded::{
    absmax, decode_block, encode_block, rank1_scale, CodedState, Coding, StateValue,
};
use crate::backend::{GradPrep, StepRule};
use crate::error::{Error, Result};

/// The most state buffers a rule takes.
const MAX_BUFFERS: usize = 3;

/// A rank-1 buffer's row and column maxima: as stored (to decode) and new (to encode).
#[derive(Clone, Copy)]
struct Rank1<'a> {
    cols: usize,
    old_row: &'a [f32],
    old_col: &'a [f32],
    new_row: &'a [f32],
    new_col: &'a [f32],
}

impl Rank1<'_> {
    fn old_at(&self, i: usize) -> f32 {
        rank1_scale(self.old_row[i / self.cols], self.old_col[i % self.cols])
    }
    fn new_at(&self, i: usize) -> f32 {
        rank1_scale(self.new_row[i / self.cols], self.new_col[i % self.cols])
    }
}

/// One coded buffer's part of a chunk of elements.
struct Part<'a> {
    coding: Coding,
    codes: &'a mut [u8],
    /// Block-wise codings: this chunk's blocks' scales, replaced as blocks are coded.
    absmax: &'a mut [f32],
    rank1: Option<Rank1<'a>>,
}

/// One chunk of the parameter, its gradient and every coded buffer's part of it.
struct Chunk<'a, E> {
    /// The chunk's first element in the whole parameter (rank-1 scales are indexed by it).
    start: usize,
    p: &'a mut [E],
    g: &'a [E],
    parts: Vec<Part<'a>>,
}

/// Decode one block of every buffer (`vals[k]`) for elements `at..` of the chunk.
fn decode<S: StateValue>(
    parts: &[Part<'_>],
    start: usize,
    block: usize,
    at: usize,
    vals: &mut [Vec<S>],
) {
    for (k, part) in parts.iter().enumerate() {
        let codes = &part.codes[part.coding.code_bytes(at)..];
        let v = &mut vals[k][..];
        match part.rank1 {
            Some(r) => decode_block(part.coding, codes, v, |i| r.old_at(start + at + i)),
            None if part.coding == Coding::BFloat16 => decode_block(part.coding, codes, v, |_| 1.0),
            None => {
                let s = part.absmax[at / block];
                decode_block(part.coding, codes, v, |_| s)
            }
        }
    }
}

/// Run the rule over `p`, `g` and the decoded state `vals` (all one block long): the
/// dense kernel's own vectorised walk.
fn update<E: Elem, S: Elem<C = E::C>, R: Rule<E::C>>(
    p: &mut [E],
    g: &[E],
    vals: &mut [Vec<S>],
    rule: &R,
    prep: &GradPrep,
) {
    let bufs: Vec<&mut [S]> = vals.iter_mut().map(|v| &mut v[..]).collect();
    walk(p, g, bufs, rule, prep)
}

/// Step one chunk, block by block: decode, update, code with the new scales.
fn step_chunk<E: Elem, S: Elem<C = E::C> + StateValue, R: Rule<E::C>>(
    chunk: Chunk<'_, E>,
    block: usize,
    rule: &R,
    prep: &GradPrep,
) {
    let n = chunk.p.len();
    let mut vals: Vec<Vec<S>> = (0..chunk.parts.len())
        .map(|_| Vec::with_capacity(block))
        .collect();
    let mut parts = chunk.parts;
    let mut at = 0;
    while at < n {
        let len = block.min(n - at);
        vals.iter_mut().for_each(|v| v.resize(len, S::of_f32(0.0)));
        decode(&parts, chunk.start, block, at, &mut vals);
        update(
            &mut chunk.p[at..at + len],
            &chunk.g[at..at + len],
            &mut vals,
            rule,
            prep,
        );
        let start = chunk.start;
        for (k, part) in parts.iter_mut().enumerate() {
            let from = part.coding.code_bytes(at);
            let codes = &mut part.codes[from..from + part.coding.code_bytes(len)];
            match part.rank1 {
                Some(r) => encode_block(part.coding, &vals[k], codes, |i| r.new_at(start + at + i)),
                None if part.coding == Coding::BFloat16 => {
                    encode_block(part.coding, &vals[k], codes, |_| 1.0)
                }
                None => {
                    let s = absmax(&vals[k]);
                    part.absmax[at / block] = s;
                    encode_block(part.coding, &vals[k], codes, |_| s)
                }
            }
        }
        at += len;
    }
}

/// A rank-1 buffer's new maxima, measured over one chunk: the rows it touches (from
/// `row0`) and every column. NaN marks a row or column with a value that is not finite.
struct Maxima {
    row0: usize,
    rows: Vec<f32>,
    cols: Vec<f32>,
}

fn nan_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() || !b.is_finite() {
        f32::NAN
    } else {
        a.max(b.abs())
    }
}

/// The first pass over one chunk: the new state of rank-1 buffer `k`'s maxima, nothing
/// written (the rule runs on a copy of each block of the parameter).
fn measure_chunk<E: Elem, S: Elem<C = E::C> + StateValue, R: Rule<E::C>>(
    chunk: &Chunk<'_, E>,
    k: usize,
    block: usize,
    rule: &R,
    prep: &GradPrep,
) -> Maxima {
    let cols = chunk.parts[k].rank1.map_or(1, |r| r.cols);
    let n = chunk.p.len();
    let row0 = chunk.start / cols;
    let last_row = (chunk.start + n.max(1) - 1) / cols;
    let mut m = Maxima {
        row0,
        rows: vec![0.0; last_row + 1 - row0],
        cols: vec![0.0; cols],
    };
    let mut vals: Vec<Vec<S>> = (0..chunk.parts.len())
        .map(|_| Vec::with_capacity(block))
        .collect();
    let mut p = Vec::with_capacity(block);
    let mut at = 0;
    while at < n {
        let len = block.min(n - at);
        vals.iter_mut().for_each(|v| v.resize(len, S::of_f32(0.0)));
        decode(&chunk.parts, chunk.start, block, at, &mut vals);
        p.clear();
        p.extend_from_slice(&chunk.p[at..at + len]);
        update(&mut p, &chunk.g[at..at + len], &mut vals, rule, prep);
        for (i, &v) in vals[k].iter().enumerate() {
            let (e, v) = (chunk.start + at + i, v.f32());
            let r = &mut m.rows[e / cols - row0];
            *r = nan_max(*r, v);
            let c = &mut m.cols[e % cols];
            *c = nan_max(*c, v);
        }
        at += len;
    }
    m
}

/// The coded buffers' storages, typed: codes and their scale tensors.
struct Typed<'a> {
    coding: Coding,
    codes: &'a mut [u8],
    scales: Vec<&'a mut [f32]>,
}

struct CodedWalk<'a, E> {
    p: &'a mut [E],
    g: &'a [E],
    bufs: Vec<Typed<'a>>,
    block: usize,
    prep: &'a GradPrep,
}

impl<E: Elem> Walker<E::C> for CodedWalk<'_, E>
where
    E::C: Elem<C = E::C> + StateValue,
{
    fn walk<R: Rule<E::C>>(self, rule: &R) {
        run::<E, E::C, R>(self, rule)
    }
}

/// Elements per parallel chunk: whole blocks, about `PAR_MIN` of them.
fn chunk_len(block: usize) -> usize {
    PAR_MIN.div_ceil(block).max(1) * block
}

/// Split the walk into chunks; `new` are the rank-1 buffers' new maxima (row, column),
/// empty on the first pass.
fn chunks<'a, E>(
    p: &'a mut [E],
    g: &'a [E],
    bufs: &'a mut [Typed<'_>],
    block: usize,
    new: &'a [(Vec<f32>, Vec<f32>)],
) -> Vec<Chunk<'a, E>> {
    let len = chunk_len(block);
    let n = p.len();
    let mut parts_by_chunk: Vec<Vec<Part<'a>>> = (0..n.div_ceil(len)).map(|_| vec![]).collect();
    for (k, b) in bufs.iter_mut().enumerate() {
        let coding = b.coding;
        let Typed { codes, scales, .. } = b;
        let (rank1, mut absmax): (Option<Rank1<'a>>, &'a mut [f32]) = match coding {
            Coding::Int4Rank1 { cols, .. } => {
                let (new_row, new_col) = match new.get(k) {
                    Some((r, c)) => (r.as_slice(), c.as_slice()),
                    None => (&[][..], &[][..]),
                };
                let rank1 = Rank1 {
                    cols,
                    old_row: &scales[0][..],
                    old_col: &scales[1][..],
                    new_row,
                    new_col,
                };
                (Some(rank1), &mut [])
            }
            Coding::BFloat16 => (None, &mut []),
            _ => (None, &mut scales[0][..]),
        };
        let mut codes: &'a mut [u8] = &mut codes[..];
        for (c, parts) in parts_by_chunk.iter_mut().enumerate() {
            let elems = len.min(n - c * len);
            let (head, rest) = std::mem::take(&mut codes).split_at_mut(coding.code_bytes(elems));
            codes = rest;
            let blocks = if rank1.is_none() && coding != Coding::BFloat16 {
                elems.div_ceil(block)
            } else {
                0
            };
            let (sh, sr) = std::mem::take(&mut absmax).split_at_mut(blocks);
            absmax = sr;
            parts.push(Part {
                coding,
                codes: head,
                absmax: sh,
                rank1,
            });
        }
    }
    p.chunks_mut(len)
        .zip(g.chunks(len))
        .zip(parts_by_chunk)
        .enumerate()
        .map(|(c, ((p, g), parts))| Chunk {
            start: c * len,
            p,
            g,
            parts,
        })
        .collect()
}

fn run<E: Elem, S: Elem<C = E::C> + StateValue, R: Rule<E::C>>(mut w: CodedWalk<'_, E>, rule: &R) {
    let prep = w.prep;
    let block = w.block;
    let rank1: Vec<usize> = (0..w.bufs.len())
        .filter(|&k| matches!(w.bufs[k].coding, Coding::Int4Rank1 { .. }))
        .collect();
    // Pass 1 (rank-1 buffers only): the new maxima.
    let mut new: Vec<(Vec<f32>, Vec<f32>)> = vec![];
    if !rank1.is_empty() {
        let mut totals: Vec<(Vec<f32>, Vec<f32>)> = w
            .bufs
            .iter()
            .map(|b| match b.coding {
                Coding::Int4Rank1 { rows, cols } => (vec![0.0; rows], vec![0.0; cols]),
                _ => (vec![], vec![]),
            })
            .collect();
        let cs = chunks(&mut *w.p, w.g, &mut w.bufs, block, &[]);
        for &k in &rank1 {
            let measured: Vec<Maxima> = cs
                .par_iter()
                .map(|c| measure_chunk::<E, S, R>(c, k, block, rule, prep))
                .collect();
            let (rows, cols) = &mut totals[k];
            for m in measured {
                for (i, v) in m.rows.iter().enumerate() {
                    rows[m.row0 + i] = merge(rows[m.row0 + i], *v);
                }
                for (c, v) in cols.iter_mut().zip(&m.cols) {
                    *c = merge(*c, *v);
                }
            }
        }
        drop(cs);
        new = totals;
    }
    // Pass 2: update and code.
    chunks(&mut *w.p, w.g, &mut w.bufs, block, &new)
        .into_par_iter()
        .for_each(|c| step_chunk::<E, S, R>(c, block, rule, prep));
    for &k in &rank1 {
        let (rows, cols) = &new[k];
        w.bufs[k].scales[0].copy_from_slice(rows);
        w.bufs[k].scales[1].copy_from_slice(cols);
    }
}

/// Two partial maxima of one row or column (NaN wins).
fn merge(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        a.max(b)
    }
}

/// One step of `rule` on a parameter whose state buffers are coded.
pub fn step(
    param: &candle_core::Tensor,
    grad: &candle_core::Tensor,
    state: &[CodedState<'_>],
    rule: &StepRule,
    prep: &GradPrep,
) -> Result<()> {
    if state.len() != rule.buffers() || state.len() > MAX_BUFFERS {
        return Err(Error::value(format!(
            "{} step: expected {} state buffers, got {}",
            rule.name(),
            rule.buffers(),
            state.len()
        )));
    }
    if matches!(rule, StepRule::Adafactor(_)) {
        return Err(Error::value(
            "Adafactor: its second moment is already factored; it keeps its state in the \
             parameter's dtype (state_dtype is not supported)"
                .to_string(),
        ));
    }
    let block = state.first().map_or(2, |s| s.block);
    if block == 0 || block % 2 != 0 || state.iter().any(|s| s.block != block) {
        return Err(Error::value(format!(
            "{} step: the state's block size must be even and the same for every buffer",
            rule.name()
        )));
    }
    let mut all = vec![param];
    for s in state {
        all.push(s.codes);
        all.extend(s.scales.iter());
    }
    nest(&all, Vec::new(), &mut |mut bufs: Vec<Buf<'_>>| {
        let (ps, pr) = bufs.remove(0);
        let mut rest = bufs.into_iter();
        let mut typed = Vec::with_capacity(state.len());
        for s in state {
            let (cs, cr) = rest.next().expect("codes");
            let CpuStorage::U8(codes) = cs else {
                candle_core::bail!("optimizer step: state codes must be uint8")
            };
            let mut scales = vec![];
            for _ in s.scales {
                let (ss, sr) = rest.next().expect("scales");
                let CpuStorage::F32(v) = ss else {
                    candle_core::bail!("optimizer step: state scales must be float32")
                };
                scales.push(&mut v[sr.0..sr.1]);
            }
            typed.push(Typed {
                coding: s.coding,
                codes: &mut codes[cr.0..cr.1],
                scales,
            });
        }
        with_ref(grad, |gs, gr| {
            macro_rules! go {
                ($v:ident, $g:ident) => {{
                    let CpuStorage::$v(g) = gs else {
                        candle_core::bail!(
                            "optimizer step: gradient dtype differs from the parameter's"
                        )
                    };
                    let w = CodedWalk {
                        p: &mut $g[pr.0..pr.1],
                        g: &g[gr.0..gr.1],
                        bufs: typed,
                        block,
                        prep,
                    };
                    with_rule(rule, w);
                }};
            }
            match ps {
                CpuStorage::F32(p) => go!(F32, p),
                CpuStorage::F64(p) => go!(F64, p),
                CpuStorage::F16(p) => go!(F16, p),
                CpuStorage::BF16(p) => go!(BF16, p),
                other => candle_core::bail!(
                    "optimizer step: parameters must be floating point, got {:?}",
                    other.dtype()
                ),
            }
            Ok(())
        })
    })
}
