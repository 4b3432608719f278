//! One benchmark configuration on upstream candle's own training path.
//!
//! The model is built from candle-nn `Linear` layers over candle `Var`s initialised from the
//! harness's safetensors file (the same weights and inputs every system starts from); a step is
//! forward, loss, `loss.backward()` (candle's GradStore) and candle-nn's `AdamW` with
//! `weight_decay = 0` (Adam). Memory is measured like every other system in the harness: the RSS
//! high-water mark above the idle baseline, reset after the warm-up step through
//! `/proc/self/clear_refs`. One JSON object is printed on stdout.
//!
//! `--device cuda` (a build with this program's `cuda` feature: tools/build-candle-cuda.sh)
//! trains on CUDA's device 0: each step is timed between two synchronisations of the device,
//! and the phases are printed on stdout (`@@gradstream-bench phase NAME` lines) for the
//! harness, which samples the device's memory from outside (candle has no counter of its own,
//! so `peak_bytes` is null; the host's RSS figures are `host_*`). `--leave-free BYTES` first
//! allocates a ballast straight from the driver that leaves BYTES of the device free
//! (`--max-batch`).
//!
//! Usage:
//!   candle-bench --workload mlp|nerf|cnn|lora --data FILE [--steps N] [--threads T] [--lr LR]
//!                [--weight-decay WD] [--depth D] [--freqs L] [--skip K] [--stages S]
//!                [--layers L] [--heads H] [--alpha A] [--device cpu|cuda]
//!                [--leave-free BYTES]

mod cnn;
mod lora;

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

use candle_core::{DType, Device, Module, Result, Tensor, Var};
use candle_nn::{AdamW, Linear, Optimizer, ParamsAdamW};

/// A workload's loss on its fixed inputs, recomputed from the current weights at each call.
pub type Loss = Box<dyn Fn() -> Result<Tensor>>;

/// The tensors of the harness's file, and the `Var`s made from them.
pub struct Params<'a> {
    tensors: &'a HashMap<String, Tensor>,
    vars: Vec<Var>,
}

impl<'a> Params<'a> {
    pub fn new(tensors: &'a HashMap<String, Tensor>) -> Self {
        Self {
            tensors,
            vars: Vec::new(),
        }
    }

    /// A tensor of the file, as it is (no gradient is tracked for it).
    pub fn tensor(&self, name: &str) -> Result<Tensor> {
        match self.tensors.get(name) {
            Some(t) => Ok(t.clone()),
            None => candle_core::bail!("{name} is not in the data file"),
        }
    }

    /// A trained parameter: a `Var` initialised from the file; its tensor for the model.
    pub fn var(&mut self, name: &str) -> Result<Tensor> {
        let v = Var::from_tensor(&self.tensor(name)?)?;
        let t = v.as_tensor().clone();
        self.vars.push(v);
        Ok(t)
    }

    pub fn into_vars(self) -> Vec<Var> {
        self.vars
    }
}

struct Args {
    workload: String,
    data: String,
    steps: usize,
    threads: usize,
    lr: f64,
    weight_decay: f64,
    depth: usize,
    freqs: usize,
    skip: usize,
    stages: usize,
    layers: usize,
    heads: usize,
    alpha: f64,
    device: String,
    leave_free: Option<usize>,
}

fn parse_args() -> std::result::Result<Args, String> {
    let mut a = Args {
        workload: String::new(),
        data: String::new(),
        steps: 5,
        threads: 0,
        lr: 1e-3,
        weight_decay: 0.0,
        depth: 0,
        freqs: 6,
        skip: 4,
        stages: 3,
        layers: 12,
        heads: 12,
        alpha: 16.0,
        device: "cpu".into(),
        leave_free: None,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let key = argv[i].as_str();
        let val = argv
            .get(i + 1)
            .ok_or_else(|| format!("{key} needs a value"))?
            .clone();
        let num = |v: &str| v.parse::<usize>().map_err(|e| format!("{key} {v}: {e}"));
        let float = |v: &str| v.parse::<f64>().map_err(|e| format!("{key} {v}: {e}"));
        match key {
            "--workload" => a.workload = val,
            "--data" => a.data = val,
            "--steps" => a.steps = num(&val)?,
            "--threads" => a.threads = num(&val)?,
            "--depth" => a.depth = num(&val)?,
            "--freqs" => a.freqs = num(&val)?,
            "--skip" => a.skip = num(&val)?,
            "--stages" => a.stages = num(&val)?,
            "--layers" => a.layers = num(&val)?,
            "--heads" => a.heads = num(&val)?,
            "--width" => {} // the file's weights give the widths
            "--lr" => a.lr = float(&val)?,
            "--weight-decay" => a.weight_decay = float(&val)?,
            "--alpha" => a.alpha = float(&val)?,
            "--device" => a.device = val,
            "--leave-free" => a.leave_free = Some(num(&val)?),
            _ => return Err(format!("unknown argument {key}")),
        }
        i += 2;
    }
    if a.workload.is_empty() || a.data.is_empty() {
        return Err("--workload and --data are required".into());
    }
    if a.device != "cpu" && a.device != "cuda" {
        return Err(format!("--device {}: expected cpu or cuda", a.device));
    }
    if a.leave_free.is_some() && a.device != "cuda" {
        return Err("--leave-free needs --device cuda".into());
    }
    Ok(a)
}

/// Bytes of a `VmRSS:`/`VmHWM:` line of /proc/self/status.
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Reset the RSS high-water mark to the current RSS; false where the kernel refuses.
fn reset_hwm() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// A model whose weights are candle `Var`s that the optimizer updates in place.
struct Model {
    vars: Vec<Var>,
    layers: HashMap<String, Linear>,
}

impl Model {
    /// `Linear` layers for every `<name>.weight`/`<name>.bias` pair in the file.
    fn from_tensors(tensors: &HashMap<String, Tensor>) -> Result<Self> {
        let mut vars = Vec::new();
        let mut layers = HashMap::new();
        let mut names: Vec<&String> = tensors.keys().filter(|k| k.ends_with(".weight")).collect();
        names.sort();
        for wname in names {
            let prefix = wname.trim_end_matches(".weight");
            let w = Var::from_tensor(&tensors[wname])?;
            let b = Var::from_tensor(&tensors[&format!("{prefix}.bias")])?;
            let layer = Linear::new(w.as_tensor().clone(), Some(b.as_tensor().clone()));
            vars.push(w);
            vars.push(b);
            layers.insert(prefix.to_string(), layer);
        }
        Ok(Self { vars, layers })
    }

    fn layer(&self, name: &str) -> &Linear {
        &self.layers[name]
    }
}

/// `depth` × (Linear + ReLU) on `x`, MSE against `target`.
fn mlp_loss(m: &Model, depth: usize, x: &Tensor, target: &Tensor) -> Result<Tensor> {
    let mut h = x.clone();
    for i in 0..depth {
        h = m.layer(&format!("layers.{i}")).forward(&h)?.relu()?;
    }
    candle_nn::loss::mse(&h, target)
}

/// NeRF positional encoding: [p, sin(2^0 p), cos(2^0 p), ..., sin(2^(L-1) p), cos(2^(L-1) p)].
fn encode(pts: &Tensor, freqs: usize) -> Result<Tensor> {
    let mut parts = vec![pts.clone()];
    for k in 0..freqs {
        let scaled = (pts * f64::from(1u32 << k))?;
        parts.push(scaled.sin()?);
        parts.push(scaled.cos()?);
    }
    Tensor::cat(&parts, 1)
}

/// The tiny NeRF MLP on encoded points, then volume rendering over the samples of each ray.
fn nerf_loss(
    m: &Model,
    depth: usize,
    skip: usize,
    enc: &Tensor,
    dists: &Tensor,
    target: &Tensor,
) -> Result<Tensor> {
    let (rays, samples) = dists.dims2()?;
    let mut h = enc.clone();
    for i in 0..depth {
        if i == skip + 1 {
            h = Tensor::cat(&[&h, enc], 1)?;
        }
        h = m.layer(&format!("layers.{i}")).forward(&h)?.relu()?;
    }
    let sigma = m
        .layer("sigma")
        .forward(&h)?
        .relu()?
        .reshape((rays, samples))?;
    let rgb = candle_nn::ops::sigmoid(&m.layer("rgb").forward(&h)?)?.reshape((rays, samples, 3))?;
    // alpha_i = 1 - exp(-sigma_i d_i); T_i = prod_{j<i} (1 - alpha_j) = exp(-sum_{j<i} sigma_j d_j).
    // candle-core has no cumprod; the exclusive cumsum is the inclusive one shifted by a zero.
    let sd = (&sigma * dists)?;
    let alpha = (1.0 - sd.neg()?.exp()?)?;
    let inclusive = sd.cumsum(1)?;
    let exclusive = Tensor::cat(
        &[
            &Tensor::zeros((rays, 1), DType::F32, sd.device())?,
            &inclusive.narrow(1, 0, samples - 1)?,
        ],
        1,
    )?;
    let trans = exclusive.neg()?.exp()?;
    let weights = (alpha * trans)?;
    let rgb_map = weights.unsqueeze(2)?.broadcast_mul(&rgb)?.sum(1)?;
    candle_nn::loss::mse(&rgb_map, target)
}

/// mlp and nerf: `Linear` layers for every `<name>.weight`/`<name>.bias` pair of the file.
fn linear_workload(a: &Args, tensors: &HashMap<String, Tensor>) -> Result<(Vec<Var>, Loss)> {
    let model = Model::from_tensors(tensors)?;
    let vars = model.vars.clone();
    let target = tensors["target"].clone();
    let (depth, skip) = (a.depth, a.skip);
    let loss: Loss = if a.workload == "mlp" {
        let x = tensors["x"].clone();
        Box::new(move || mlp_loss(&model, depth, &x, &target))
    } else {
        let enc = encode(&tensors["pts"], a.freqs)?;
        let dists = tensors["dists"].clone();
        Box::new(move || nerf_loss(&model, depth, skip, &enc, &dists, &target))
    };
    Ok((vars, loss))
}

/// The device of `--device`: the CPU, or CUDA's device 0 (a build with the `cuda` feature).
fn device(name: &str) -> Result<Device> {
    match name {
        "cuda" if !cfg!(feature = "cuda") => candle_core::bail!(
            "this candle-bench was built without its `cuda` feature \
             (build it with tools/build-candle-cuda.sh)"
        ),
        "cuda" => Device::new_cuda(0),
        _ => Ok(Device::Cpu),
    }
}

/// Allocate, straight from the driver, all of the device's free memory but `bytes`, for the
/// life of the process: what candle allocates from now on has `bytes` of the device.
#[cfg(feature = "cuda")]
fn leave_free(dev: &Device, bytes: usize) -> Result<usize> {
    use candle_core::cuda_backend::cudarc::driver::result;
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        candle_core::Error::Msg(format!("ballast: {what}: {e}"))
    };
    let stream = dev.as_cuda_device()?.cuda_stream();
    let ctx = stream.context();
    let (free, _total) = ctx.mem_get_info().map_err(|e| fail("mem_get_info", &e))?;
    if free <= bytes {
        candle_core::bail!("ballast: only {free} bytes free, under the cap of {bytes}");
    }
    let size = free - bytes;
    // Never freed: the process ends with it.
    unsafe { result::malloc_sync(size) }.map_err(|e| fail(&format!("malloc({size})"), &e))?;
    Ok(size)
}

#[cfg(not(feature = "cuda"))]
fn leave_free(_dev: &Device, _bytes: usize) -> Result<usize> {
    candle_core::bail!("--leave-free needs the `cuda` feature")
}

/// A phase mark for the harness's memory sampler (`--device cuda` only); the baseline mark
/// sits in a quiet span, so the samples around it are of the idle process.
fn mark(phase: &str, on_gpu: bool) {
    if !on_gpu {
        return;
    }
    let quiet = Duration::from_millis(50);
    if phase == "baseline" {
        std::thread::sleep(quiet);
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\n@@gradstream-bench phase {phase}");
    let _ = out.flush();
    drop(out);
    if phase == "baseline" {
        std::thread::sleep(quiet);
    }
}

fn run(a: &Args) -> Result<String> {
    let dev = device(&a.device)?;
    let on_gpu = dev.is_cuda();
    // Start the runtime (rayon pool, gemm; on a GPU its context, cuBLAS and the kernels the
    // optimizer uses) on tiny tensors so the baseline is the idle process.
    {
        let w = Var::from_tensor(&Tensor::ones((16, 16), DType::F32, &dev)?)?;
        let loss = w.as_tensor().matmul(w.as_tensor())?.sum_all()?;
        let mut opt = AdamW::new(vec![w.clone()], ParamsAdamW::default())?;
        opt.backward_step(&loss)?;
    }
    dev.synchronize()?;
    let ballast = match a.leave_free {
        Some(bytes) => Some(leave_free(&dev, bytes)?),
        None => None,
    };
    mark("baseline", on_gpu);
    let baseline = status_bytes("VmRSS:");

    let tensors = candle_core::safetensors::load(&a.data, &dev)?;
    let (vars, loss_fn) = match a.workload.as_str() {
        "mlp" | "nerf" => linear_workload(a, &tensors)?,
        "cnn" => cnn::build(&tensors, a.stages)?,
        "lora" => lora::build(&tensors, a.layers, a.heads, a.alpha)?,
        w => candle_core::bail!("unknown workload {w}"),
    };
    drop(tensors);
    let trained: usize = vars.iter().map(|v| v.elem_count()).sum();
    let adam = ParamsAdamW {
        lr: a.lr,
        weight_decay: a.weight_decay,
        ..ParamsAdamW::default()
    };
    let mut opt = AdamW::new(vars, adam)?;

    let step = |opt: &mut AdamW| -> Result<f32> {
        let loss = loss_fn()?;
        let value = loss.to_scalar::<f32>()?;
        let grads = loss.backward()?;
        opt.step(&grads)?;
        Ok(value)
    };

    let mut losses = vec![step(&mut opt)?];
    let steady = status_bytes("VmRSS:");
    let hwm_reset = reset_hwm();
    dev.synchronize()?;
    mark("measure", on_gpu);
    let mut times = Vec::with_capacity(a.steps);
    for _ in 0..a.steps {
        dev.synchronize()?;
        let t0 = Instant::now();
        losses.push(step(&mut opt)?);
        dev.synchronize()?;
        times.push(t0.elapsed().as_secs_f64());
    }
    mark("done", on_gpu);
    let hwm = status_bytes("VmHWM:");
    times.sort_by(|p, q| p.total_cmp(q));
    let median = if times.is_empty() {
        0.0
    } else if times.len() % 2 == 1 {
        times[times.len() / 2]
    } else {
        (times[times.len() / 2 - 1] + times[times.len() / 2]) / 2.0
    };
    let losses_json: Vec<String> = losses.iter().map(|l| format!("{l:e}")).collect();
    let times_json: Vec<String> = times.iter().map(|t| format!("{t:e}")).collect();
    if on_gpu {
        // No counter of candle's own: the harness's driver samples give the device's peak.
        return Ok(format!(
            "{{\"status\": \"ok\", \"device\": \"cuda\", \"peak_bytes\": null, \
             \"host_peak_bytes\": {}, \"baseline_rss_bytes\": {baseline}, \
             \"host_steady_bytes\": {}, \"hwm_reset\": {hwm_reset}, \
             \"ballast_bytes\": {}, \"step_seconds\": {median:e}, \"step_times\": [{}], \
             \"losses\": [{}], \"trained_params\": {trained}, \"threads\": {}}}",
            hwm.saturating_sub(baseline),
            steady.saturating_sub(baseline),
            ballast.map_or("null".to_string(), |b| b.to_string()),
            times_json.join(", "),
            losses_json.join(", "),
            candle_core::utils::get_num_threads(),
        ));
    }
    Ok(format!(
        "{{\"status\": \"ok\", \"peak_bytes\": {}, \"baseline_rss_bytes\": {baseline}, \
         \"steady_bytes\": {}, \"hwm_reset\": {hwm_reset}, \"step_seconds\": {median:e}, \
         \"step_times\": [{}], \"losses\": [{}], \"trained_params\": {trained}, \
         \"threads\": {}}}",
        hwm.saturating_sub(baseline),
        steady.saturating_sub(baseline),
        times_json.join(", "),
        losses_json.join(", "),
        candle_core::utils::get_num_threads(),
    ))
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("candle-bench: {msg}");
            std::process::exit(2);
        }
    };
    if args.threads > 0 && std::env::var_os("RAYON_NUM_THREADS").is_none() {
        std::env::set_var("RAYON_NUM_THREADS", args.threads.to_string());
    }
    match run(&args) {
        Ok(json) => println!("{json}"),
        Err(e) => {
            println!(
                "{{\"status\": \"error\", \"reason\": {:?}}}",
                format!("candle: {e}")
            );
            std::process::exit(1);
        }
    }
}
