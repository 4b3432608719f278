//! The fallback backend: candle's own ops, which every candle device runs (CUDA, Metal).
//! Each family trait's default methods are this backend; what candle lacks raises a
//! NotImplementedError naming the op and the device.

use super::{
    AttentionOps, CastOps, ConvOps, ElementwiseOps, IndexOps, InplaceOps, LinalgOps, MaskOps,
    MatmulOps, NnOps, NormOps, OptimOps, PoolOps, ReduceOps, RenderOps, SortOps,
};

/// candle's ops on any device.
pub struct Candle;

impl CastOps for Candle {}
impl ElementwiseOps for Candle {}
impl InplaceOps for Candle {}
impl MaskOps for Candle {}
impl ReduceOps for Candle {}
impl NnOps for Candle {}
impl IndexOps for Candle {}
impl SortOps for Candle {}
impl RenderOps for Candle {}
impl OptimOps for Candle {}
impl AttentionOps for Candle {}
impl ConvOps for Candle {}
impl PoolOps for Candle {}
impl NormOps for Candle {}
impl LinalgOps for Candle {}
impl MatmulOps for Candle {}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    use super::Candle;
    use crate::backend::cpu::Cpu;
    use crate::backend::nn::Affine;
    use crate::backend::{
        Bin, ElementwiseOps, InplaceOps, LineKernel, MaskOps, NnOps, ReduceOps, UnaryOp, Update,
    };
    use crate::error::Error;

    fn close(a: &Tensor, b: &Tensor) {
        let (a, b) = (a.to_vec1::<f32>().unwrap(), b.to_vec1::<f32>().unwrap());
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{a:?} vs {b:?}");
        }
    }

    fn sample() -> Tensor {
        let v: Vec<f32> = (0..64).map(|i| (i as f32 - 31.5) / 6.0).collect();
        Tensor::from_vec(v, 64, &Device::Cpu).unwrap()
    }

    // The fallback runs on CPU tensors too, so it is checked against our kernels here.
    #[test]
    fn fallback_matches_the_cpu_kernels() {
        let x = sample();
        let g = x.affine(0.5, 1.0).unwrap();
        let softplus = UnaryOp::Softplus {
            beta: 2.0,
            threshold: 3.0,
        };
        for op in [
            UnaryOp::Exp,
            UnaryOp::Sigmoid,
            UnaryOp::Silu,
            UnaryOp::Gelu,
            UnaryOp::GeluTanh,
            softplus,
        ] {
            close(
                &Candle.unary("t", op, &x).unwrap(),
                &Cpu.unary("t", op, &x).unwrap(),
            );
            let grad = Bin::Grad(op);
            if op != UnaryOp::Exp {
                close(
                    &Candle.binary("t", grad, &g, &x).unwrap(),
                    &Cpu.binary("t", grad, &g, &x).unwrap(),
                );
            }
        }
        let (a, _) = Candle.threshold("relu", &x, 0.0, 0.0, true).unwrap();
        close(&a, &Cpu.threshold("relu", &x, 0.0, 0.0, true).unwrap().0);
        let rows = x.reshape((8, 8)).unwrap();
        let soft = LineKernel::Softmax { log: true };
        let flat = |t: Tensor| t.flatten_all().unwrap();
        close(
            &flat(Candle.lines(&rows, 1, soft).unwrap()),
            &flat(Cpu.lines(&rows, 1, soft).unwrap()),
        );
        let (w, b) = (g.narrow(0, 0, 8).unwrap(), g.narrow(0, 8, 8).unwrap());
        let affine = Affine {
            weight: Some(&w),
            bias: Some(&b),
        };
        let (h1, m1, r1) = Candle.layer_norm("ln", &rows, affine, 8, 1e-5).unwrap();
        let (h2, _, r2) = Cpu.layer_norm("ln", &rows, affine, 8, 1e-5).unwrap();
        close(&flat(h1), &flat(h2));
        close(&r1, &r2);
        let gy = g.reshape((8, 8)).unwrap();
        let (gx1, p1) = Candle
            .layer_norm_backward("ln", &gy, &rows, (&m1, &r1), Some(&w), 8, true)
            .unwrap();
        let (gx2, p2) = Cpu
            .layer_norm_backward("ln", &gy, &rows, (&m1, &r1), Some(&w), 8, true)
            .unwrap();
        close(&flat(gx1), &flat(gx2));
        let ((dw1, db1), (dw2, db2)) = (p1.unwrap(), p2.unwrap());
        close(&dw1, &dw2);
        close(&db1, &db2);
        let (d1, d2) = (x.copy().unwrap(), x.copy().unwrap());
        Candle.update("add_", &d1, &g, Update::Add).unwrap();
        Cpu.update("add_", &d2, &g, Update::Add).unwrap();
        close(&d1, &d2);
    }

    #[test]
    fn missing_kernels_name_the_op_and_device() {
        let err = Candle
            .unary("log1p", UnaryOp::Log1p, &sample())
            .unwrap_err();
        match err {
            Error::NotImplemented(m) => assert!(m.starts_with("log1p:") && m.contains("'cpu'")),
            other => panic!("{other:?}"),
        }
    }
}
