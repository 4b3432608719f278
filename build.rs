//! Builds gradstream's own CUDA kernels (`src/backend/cuda/kernels/*.cu`), when a feature
//! asks for them:
//!
//! - `cuda`: each kernel file compiled by nvcc to PTX for the target architecture
//!   (`CUDA_COMPUTE_CAP`, default 90), written to `OUT_DIR/<file>.ptx` for `include_str!`.
//! - `cuda-emulator`: the same files compiled by the host C++ compiler against the CPU
//!   emulator of the CUDA execution model (`kernels/emulator.h`), so the tests run every
//!   kernel without a GPU.
//!
//! nvcc is run directly rather than through `bindgen_cuda` (what candle-kernels uses): its
//! up-to-date check compares each .cu file's time with its PTX's only, so a change to the
//! shared header would not rebuild the kernels.

use std::path::{Path, PathBuf};

const KERNELS: &str = "src/backend/cuda/kernels";

/// The kernel sources: every `.cu` file (the emulator's self-test too).
fn kernel_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(KERNELS)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "cu"));
    files.sort();
    files
}

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed={KERNELS}");
    let files = kernel_files();
    for f in &files {
        println!("cargo::rerun-if-changed={}", f.display());
    }
    // The headers the kernels include (gs_cuda.cuh, emulator.h, a family's own .cuh) and
    // the emulator's source: every other file there.
    for f in std::fs::read_dir(KERNELS).into_iter().flatten().flatten() {
        println!("cargo::rerun-if-changed={}", f.path().display());
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    if std::env::var_os("CARGO_FEATURE_CUDA_EMULATOR").is_some() {
        emulator(&files);
    }
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
        ptx(&files, &out);
    }
}

#[cfg(feature = "cuda-emulator")]
fn emulator(files: &[PathBuf]) {
    let mut b = cc::Build::new();
    b.cpp(true)
        .std("c++17")
        .define("GS_EMULATE", None)
        .include(KERNELS)
        .opt_level(2)
        .warnings(false)
        // `.cu` is not a C++ extension to the compiler: say so before the sources.
        .flag("-xc++")
        .file(format!("{KERNELS}/emulator.cpp"));
    for f in files {
        b.file(f);
    }
    // Each kernel registers itself in a static constructor: keep every object file.
    b.link_lib_modifier("+whole-archive");
    b.compile("gs_kernels_emulated");
}

#[cfg(not(feature = "cuda-emulator"))]
fn emulator(_: &[PathBuf]) {}

/// Compiles each kernel file to `OUT_DIR/<stem>.ptx` with nvcc (from `PATH`, or
/// `$CUDA_HOME/bin`), for `sm_$CUDA_COMPUTE_CAP`.
fn ptx(files: &[PathBuf], out: &Path) {
    println!("cargo::rerun-if-env-changed=CUDA_COMPUTE_CAP");
    println!("cargo::rerun-if-env-changed=CUDA_HOME");
    let cap = std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "90".into());
    let nvcc = std::env::var("CUDA_HOME")
        .map(|h| Path::new(&h).join("bin/nvcc"))
        .ok()
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("nvcc"));
    // The emulator's self-test kernels have no place on a GPU.
    for f in files
        .iter()
        .filter(|f| !f.ends_with("emulator_selftest.cu"))
    {
        let stem = f.file_stem().expect("a kernel file name");
        let target = out.join(stem).with_extension("ptx");
        let status = std::process::Command::new(&nvcc)
            .arg(format!("--gpu-architecture=sm_{cap}"))
            .args(["--ptx", "-std=c++17", "-O3", "--expt-relaxed-constexpr"])
            .arg("-I")
            .arg(KERNELS)
            .arg("-o")
            .arg(&target)
            .arg(f)
            .status()
            .unwrap_or_else(|e| panic!("nvcc ({}) did not start: {e}", nvcc.display()));
        assert!(status.success(), "nvcc failed on {}", f.display());
    }
}
