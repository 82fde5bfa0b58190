//! Compiles `kernels/*.cu`, unchanged, for the host: the emulated CUDA devices run them
//! (`engine/src/backend/gpu/emulated/`). Each kernel file is compiled after `kernels/host/cuda_host.h` (CUDA's
//! built-ins on the CPU), `ops.cuh` (the op codes of `kernels/codes.rs`, written here as C macros
//! for both compilers of the kernels) and `kernels/common.cuh`, with a table of the kernels that
//! `kernels/declarations.rs` declares in that file: the list `engine/src/backend/gpu/launch.rs` makes the
//! launchers from, so a launcher whose kernel is missing fails this build, naming it.
//!
//! It also writes `host-kernels.rsp` beside them: the compiler's arguments for the same build,
//! so `.ci/kernel-library.py` can build a shared library from it (a kernel with one change, or
//! the kernels under AddressSanitizer) that the emulator runs instead of the linked one
//! (`PLACELAB_EMULATOR_KERNELS`), without rebuilding placelab.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

// The kernels `kernels/declarations.rs` declares (what `engine/src/backend/gpu/launch.rs` launches), as
// `DECLARED`: (family, source, suffixes). Their parameters are for the launchers alone.
macro_rules! kernels {
    ($($family:ident in $source:ident for $suffixes:ident ($($arg:ident: $t:ty),* $(,)?);)*) => {
        const DECLARED: &[(&str, &str, &[&str])] =
            &[$((stringify!($family), stringify!($source), $suffixes)),*];
    };
}
include!("../kernels/declarations.rs");

/// The declared kernels' names (`binary_f32`) by the stem of their file (`elementwise`).
fn declared_kernels() -> BTreeMap<String, Vec<String>> {
    let mut by_source: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (family, source, suffixes) in DECLARED {
        let names = by_source.entry(source.to_lowercase()).or_default();
        names.extend(suffixes.iter().map(|s| format!("{family}_{s}")));
    }
    assert!(
        !by_source.is_empty(),
        "kernels/declarations.rs declares no kernel"
    );
    by_source
}

// The codes of `kernels/codes.rs`, as `CODES`: (Rust type, C prefix, [(variant, code)]).
macro_rules! op_codes {
    ($($(#[$doc:meta])* $f:ident($ty:ident) as $prefix:ident { $($v:ident = $c:literal),* $(,)? })*) => {
        const CODES: &[(&str, &str, &[(&str, i32)])] =
            &[$((stringify!($ty), stringify!($prefix), &[$((stringify!($v), $c)),*])),*];
    };
}
include!("../kernels/codes.rs");

// The ziggurat's tables, written for the CPU backend and for the kernels (`ziggurat_rust`,
// `ziggurat_cuda`).
include!("../kernels/ziggurat.rs");

/// `ops.cuh`: a C macro for each code of `kernels/codes.rs` (`#define PL_BINARY_ADD 0`).
fn ops_header() -> String {
    let mut h = String::from(
        "// Written by build.rs from kernels/codes.rs, the one list of the kernels' op codes:\n\
         // edit that file, not this one.\n",
    );
    for (ty, prefix, codes) in CODES {
        writeln!(h, "\n// {ty}").unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for (variant, code) in *codes {
            assert!(
                seen.insert(code),
                "kernels/codes.rs: {ty} has the code {code} twice"
            );
            writeln!(h, "#define {prefix}_{} {code}", capitals(variant)).unwrap();
        }
    }
    h
}

/// A variant's name as a C macro's: `ReluBackward` is `RELU_BACKWARD`, `BF16` stays `BF16`.
fn capitals(name: &str) -> String {
    let mut out = String::new();
    let mut after_lower = false;
    for c in name.chars() {
        if c.is_ascii_uppercase() && after_lower {
            out.push('_');
        }
        after_lower = c.is_ascii_lowercase();
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// Copies `kernels/*.cu` and `common.cuh` into `dst` (what the host build compiles); returns `dst`.
fn copy_sources(kernels: &std::path::Path, dst: &std::path::Path) -> PathBuf {
    std::fs::create_dir_all(dst).unwrap();
    for entry in std::fs::read_dir(kernels).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".cu") || name.ends_with(".cuh") {
            std::fs::copy(&path, dst.join(&name)).unwrap();
        }
    }
    dst.to_path_buf()
}

/// The host build's C++ flags, beside its include folders and files.
const FLAGS: &[&str] = &[
    "-std=c++17",
    "-O2",
    // NVRTC contracts `a * b + c` into FMAs by default; the host does not, so results match the
    // CPU backend's bit for bit (a GPU may differ in the last bit there).
    "-ffp-contract=off",
    "-fno-exceptions",
    "-fno-rtti",
    "-Wno-unused-parameter",
];

fn main() {
    let engine = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    // The repository's kernels/, beside this crate's folder.
    let kernels = engine.join("../kernels");
    println!("cargo:rerun-if-changed=../kernels");
    let sources = copy_sources(&kernels, &out.join("kernels"));
    // Beside the sources: NVRTC's programs include it from there too (`engine/src/backend/gpu/nvrtc.rs`).
    std::fs::write(sources.join("ops.cuh"), ops_header()).unwrap();
    std::fs::write(sources.join("random_tables.cuh"), ziggurat_cuda()).unwrap();
    std::fs::write(out.join("random_tables.rs"), ziggurat_rust()).unwrap();

    let host = kernels.join("host");
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .cpp_link_stdlib(None) // header-only C++: templates, no library calls
        .include(&sources)
        .include(&host)
        .file(host.join("emulator.cpp"));
    for flag in FLAGS {
        build.flag(flag);
    }
    let mut files = vec![host.join("emulator.cpp")];

    let mut index = String::from("#include \"cuda_host.h\"\n#include \"registry.h\"\n");
    let mut tables = Vec::new();
    for (stem, names) in declared_kernels() {
        let cu = sources.join(format!("{stem}.cu"));
        assert!(
            cu.exists(),
            "kernels/{stem}.cu is named in kernels/declarations.rs but missing"
        );
        let mut text = format!(
            "#include \"cuda_host.h\"\n#include \"ops.cuh\"\n#include \"common.cuh\"\n#include \"{stem}.cu\"\n#include \"registry.h\"\n\
             extern \"C\" const pl_kernel placelab_emu_{stem}[] = {{\n"
        );
        for n in &names {
            writeln!(text, "    PL_KERNEL({n})").unwrap();
        }
        writeln!(
            text,
            "}};\nextern \"C\" const size_t placelab_emu_{stem}_len = {};",
            names.len()
        )
        .unwrap();
        let file = out.join(format!("emulated_{stem}.cpp"));
        std::fs::write(&file, text).unwrap();
        build.file(&file);
        files.push(file);
        writeln!(index, "extern \"C\" const pl_kernel placelab_emu_{stem}[];").unwrap();
        writeln!(index, "extern \"C\" const size_t placelab_emu_{stem}_len;").unwrap();
        tables.push(stem);
    }
    // One entry point for the Rust side: the i-th table and its length.
    index.push_str("extern \"C\" const pl_kernel* placelab_emu_table(size_t i, size_t* len) {\n    switch (i) {\n");
    for (i, stem) in tables.iter().enumerate() {
        writeln!(
            index,
            "        case {i}: *len = placelab_emu_{stem}_len; return placelab_emu_{stem};"
        )
        .unwrap();
    }
    index.push_str("        default: *len = 0; return nullptr;\n    }\n}\n");
    let index_file = out.join("emulated_index.cpp");
    std::fs::write(&index_file, index).unwrap();
    build.file(&index_file);
    files.push(index_file);
    build.compile("placelab_emulator");
    write_response_file(&out, &[sources, host], &files);
}

/// `host-kernels.rsp`: `c++ @host-kernels.rsp -shared -fPIC -o lib.so` builds what `main` linked.
/// An include folder given before it takes precedence (a copy of the sources with a change).
fn write_response_file(out: &std::path::Path, includes: &[PathBuf], files: &[PathBuf]) {
    let quoted = |p: &std::path::Path| format!("\"{}\"", p.display());
    let mut args: Vec<String> = FLAGS.iter().map(|f| f.to_string()).collect();
    args.extend(includes.iter().map(|i| format!("-I{}", quoted(i))));
    args.extend(files.iter().map(|f| quoted(f)));
    std::fs::write(out.join("host-kernels.rsp"), args.join("\n") + "\n").unwrap();
}
