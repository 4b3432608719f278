//! Walking a strided layout: the element offsets of a view, in row-major order, and where
//! each of its rows starts (what the CPU kernels walk, and what an op hands a kernel that
//! reads its operands through their strides).

use candle_core::Layout;

/// Offsets of every element of `layout`, row-major. Cheap per step: an odometer.
pub struct StridedOffsets {
    dims: Vec<usize>,
    strides: Vec<usize>,
    index: Vec<usize>,
    next: Option<usize>,
}

impl StridedOffsets {
    pub fn new(layout: &Layout) -> Self {
        let dims = layout.dims().to_vec();
        let empty = dims.contains(&0);
        StridedOffsets {
            index: vec![0; dims.len()],
            strides: layout.stride().to_vec(),
            next: (!empty).then_some(layout.start_offset()),
            dims,
        }
    }
}

impl Iterator for StridedOffsets {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        let cur = self.next?;
        let mut off = cur;
        let mut d = self.dims.len();
        loop {
            if d == 0 {
                self.next = None;
                break;
            }
            d -= 1;
            self.index[d] += 1;
            off += self.strides[d];
            if self.index[d] < self.dims[d] {
                self.next = Some(off);
                break;
            }
            off -= self.strides[d] * self.dims[d];
            self.index[d] = 0;
        }
        Some(cur)
    }
}

/// The element offset of the first element of row `row` (rows = all dims but the last).
pub fn row_offset(dims: &[usize], strides: &[usize], start: usize, mut row: usize) -> usize {
    let mut off = start;
    for d in (0..dims.len().saturating_sub(1)).rev() {
        let n = dims[d];
        off += (row % n) * strides[d];
        row /= n;
    }
    off
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposed_offsets() {
        let l = Layout::contiguous((2, 3)).transpose(0, 1).unwrap();
        let offs: Vec<_> = StridedOffsets::new(&l).collect();
        assert_eq!(offs, vec![0, 3, 1, 4, 2, 5]);
        let n = Layout::contiguous((4, 3)).narrow(0, 1, 2).unwrap();
        assert_eq!(
            StridedOffsets::new(&n).collect::<Vec<_>>(),
            vec![3, 4, 5, 6, 7, 8]
        );
        let z = Layout::contiguous((0, 3));
        assert_eq!(StridedOffsets::new(&z).count(), 0);
        let s = Layout::contiguous(());
        assert_eq!(StridedOffsets::new(&s).collect::<Vec<_>>(), vec![0]);
    }
}
