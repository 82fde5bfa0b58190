//! What CUDA this machine has, asked by a child process (`placelab probe-cuda`, which prints a
//! `cuda_choice::Probe` as JSON): the session's own process never loads CUDA, and the child may
//! load libraries of every major, which one process built for one major must not. It loads
//! `libcuda.so.1` for the driver's CUDA version and the GPUs' compute capability, then every
//! NVRTC, cuBLAS and cuBLASLt file it finds, in the order a session prefers them, and asks each
//! its own version.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};

use placelab::cuda::cuda_major::{is_library_of, wheel_folders};

use super::cuda_choice::{Found, Library, MAJORS, Probe, Version};

/// The hidden subcommand the child runs.
pub const SUBCOMMAND: &str = "probe-cuda";

/// In the child: the probe, as one line of JSON on stdout.
pub fn print_probe() -> i32 {
    let probe = Probe {
        driver: driver_version(),
        oldest_gpu: oldest_gpu(),
        found: libraries(&search_folders()),
    };
    match serde_json::to_string(&probe) {
        Ok(line) => {
            println!("{line}");
            0
        }
        Err(e) => {
            eprintln!("placelab: cannot write the CUDA probe: {e}");
            1
        }
    }
}

/// In the session: runs the child and reads its answer. A child that fails is a machine whose
/// CUDA cannot be asked, which the default engine then reports as it finds it.
pub fn probe() -> Probe {
    let failed = |why: String| Probe {
        driver: Err(format!(
            "the CUDA probe (placelab {SUBCOMMAND}) failed: {why}"
        )),
        oldest_gpu: None,
        found: Vec::new(),
    };
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return failed(e.to_string()),
    };
    let out = match std::process::Command::new(exe)
        .arg(SUBCOMMAND)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
    {
        Ok(out) => out,
        Err(e) => return failed(e.to_string()),
    };
    if !out.status.success() {
        return failed(format!("it ended with {}", out.status));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| failed(format!("{e}: {text:?}")))
}

/// A library this process loaded, kept loaded for its short life.
struct Loaded(*mut c_void);

impl Loaded {
    fn open(name: &str) -> Option<Loaded> {
        let c = CString::new(name).ok()?;
        // SAFETY: dlopen with a NUL-terminated name; the child only asks versions and exits.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        (!handle.is_null()).then_some(Loaded(handle))
    }

    /// The function `name` as `F` (a C function pointer type the caller names rightly).
    fn function<F: Copy>(&self, name: &CStr) -> Option<F> {
        // SAFETY: dlsym on a live handle; the caller's `F` is the symbol's C signature.
        let address = unsafe { libc::dlsym(self.0, name.as_ptr()) };
        (!address.is_null())
            .then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&address) })
    }

    /// Where the file that defines `symbol` lies: the library a soname resolved to.
    fn path_of(&self, symbol: &CStr) -> Option<PathBuf> {
        // SAFETY: as in `function`; dladdr fills `info` for an address inside a loaded library.
        let address = unsafe { libc::dlsym(self.0, symbol.as_ptr()) };
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        if address.is_null() || unsafe { libc::dladdr(address, &mut info) } == 0 {
            return None;
        }
        let name = unsafe { CStr::from_ptr(info.dli_fname as *const c_char) };
        Some(PathBuf::from(name.to_string_lossy().into_owned()))
    }
}

type IntOut = unsafe extern "C" fn(*mut c_int) -> c_int;

fn driver() -> Option<Loaded> {
    Loaded::open("libcuda.so.1")
}

/// `cuDriverGetVersion`: `12080` is CUDA 12.8. It needs no `cuInit`.
fn driver_version() -> Result<Version, String> {
    let lib = driver().ok_or("no NVIDIA driver found (libcuda.so.1 is not installed)")?;
    let get: IntOut = lib
        .function(c"cuDriverGetVersion")
        .ok_or("the NVIDIA driver has no cuDriverGetVersion")?;
    let mut v = 0;
    // SAFETY: the driver's C function, given an int to write.
    match unsafe { get(&mut v) } {
        0 => Ok(Version {
            major: (v / 1000) as u32,
            minor: ((v % 1000) / 10) as u32,
        }),
        status => Err(format!("cuDriverGetVersion failed (CUresult {status})")),
    }
}

/// The lowest compute capability among the GPUs, or `None` where the driver cannot list them.
fn oldest_gpu() -> Option<Version> {
    type Init = unsafe extern "C" fn(u32) -> c_int;
    type Get = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
    type Attribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
    const CC_MAJOR: c_int = 75;
    const CC_MINOR: c_int = 76;
    let lib = driver()?;
    let init: Init = lib.function(c"cuInit")?;
    let count: IntOut = lib.function(c"cuDeviceGetCount")?;
    let get: Get = lib.function(c"cuDeviceGet")?;
    let attribute: Attribute = lib.function(c"cuDeviceGetAttribute")?;
    let mut n = 0;
    // SAFETY: the driver's C functions, each given ints to write.
    if unsafe { init(0) } != 0 || unsafe { count(&mut n) } != 0 {
        return None;
    }
    (0..n)
        .filter_map(|i| {
            let (mut device, mut major, mut minor) = (0, 0, 0);
            let ok = unsafe {
                get(&mut device, i) == 0
                    && attribute(&mut major, CC_MAJOR, device) == 0
                    && attribute(&mut minor, CC_MINOR, device) == 0
            };
            ok.then_some(Version {
                major: major as u32,
                minor: minor as u32,
            })
        })
        .min()
}

/// The folders to look in, in the order a session prefers them: `PLACELAB_CUDA_LIB_DIRS`, the
/// NVIDIA wheels of the Pythons it can see, then a CUDA toolkit. The loader's own path (the
/// system's libraries, `LD_LIBRARY_PATH`) comes last, in `libraries`.
pub fn search_folders() -> Vec<PathBuf> {
    let mut folders: Vec<PathBuf> = std::env::var_os("PLACELAB_CUDA_LIB_DIRS")
        .map(|dirs| std::env::split_paths(&dirs).collect())
        .unwrap_or_default();
    for site in site_packages() {
        for major in MAJORS {
            folders.extend(wheel_folders(major).iter().map(|w| site.join(w)));
        }
    }
    let mut toolkits: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        .collect();
    toolkits.push("/usr/local/cuda".into());
    toolkits.extend(versioned_toolkits());
    for toolkit in toolkits {
        folders.push(toolkit.join("lib64"));
        folders.push(toolkit.join("targets/x86_64-linux/lib"));
    }
    let mut seen = std::collections::HashSet::new();
    folders.retain(|f| f.is_dir() && seen.insert(f.canonicalize().unwrap_or_else(|_| f.clone())));
    folders
}

/// `/usr/local/cuda-12.8` …, the newest first.
fn versioned_toolkits() -> Vec<PathBuf> {
    let mut found = entries_named(Path::new("/usr/local"), "cuda-");
    found.reverse();
    found
}

/// The entries of `dir` whose names start with `prefix`, sorted.
fn entries_named(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .collect();
    found.sort();
    found
}

/// The `site-packages` (and Debian's `dist-packages`) folders of the Pythons placelab can see: the
/// active virtual or conda environment, the `python3` on `PATH`, the user's, the system's.
fn site_packages() -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = ["VIRTUAL_ENV", "CONDA_PREFIX"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        .collect();
    if let Some(path) = std::env::var_os("PATH") {
        prefixes.extend(
            std::env::split_paths(&path)
                .filter(|dir| dir.join("python3").is_file())
                .filter_map(|dir| dir.parent().map(Path::to_path_buf)),
        );
    }
    prefixes.extend(std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local")));
    prefixes.extend(["/usr/local", "/usr", "/opt/conda"].map(PathBuf::from));
    let mut sites = Vec::new();
    for prefix in prefixes {
        for lib in ["lib", "lib64"] {
            for python in entries_named(&prefix.join(lib), "python3") {
                sites.extend(["site-packages", "dist-packages"].map(|s| python.join(s)));
            }
        }
    }
    sites.push("/usr/lib/python3/dist-packages".into());
    sites.retain(|s| s.is_dir());
    sites
}

/// The first library of each kind and major found in `folders` (in their order), else on the
/// loader's path, each with the version it reports once loaded. Only the first is loaded: a
/// session uses no other (`cuda_choice`), and cuBLAS takes a while to load.
fn libraries(folders: &[PathBuf]) -> Vec<Found> {
    let mut found: Vec<Found> = Vec::new();
    let have = |found: &[Found], library: Library, major: u32| {
        found
            .iter()
            .any(|f| f.library == library && f.version.major == major)
    };
    for folder in folders {
        let Ok(entries) = std::fs::read_dir(folder) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        // `libnvrtc.so.12` before `libnvrtc.so.12.8.93`: the soname first.
        names.sort_by_key(|n| (n.len(), n.clone()));
        for library in LOAD_ORDER {
            for major in MAJORS {
                if have(&found, library, major) {
                    continue;
                }
                let Some(name) = names
                    .iter()
                    .find(|n| is_library_of(n, library.file_prefix(), major))
                else {
                    continue;
                };
                let path = folder.join(name);
                if let Some(f) =
                    Loaded::open(&path.to_string_lossy()).and_then(|l| ask(&l, library, path))
                {
                    found.push(f);
                }
            }
        }
    }
    for library in LOAD_ORDER {
        for major in MAJORS {
            if have(&found, library, major) {
                continue;
            }
            let soname = format!("{}{major}", library.file_prefix());
            let Some(lib) = Loaded::open(&soname) else {
                continue;
            };
            let path = lib
                .path_of(version_symbol(library))
                .unwrap_or_else(|| soname.into());
            found.extend(ask(&lib, library, path));
        }
    }
    found.retain(|f| f.version.major != 0);
    found.sort_by_key(|f| LOAD_ORDER.iter().position(|&l| l == f.library));
    found
}

/// cuBLASLt before cuBLAS: cuBLAS needs it, and finds the one already loaded.
const LOAD_ORDER: [Library; 3] = [Library::Nvrtc, Library::CublasLt, Library::Cublas];

fn version_symbol(library: Library) -> &'static CStr {
    match library {
        Library::Nvrtc => c"nvrtcVersion",
        Library::Cublas => c"cublasGetProperty",
        Library::CublasLt => c"cublasLtGetProperty",
    }
}

/// The version `lib` reports: `nvrtcVersion`, or the `MAJOR_VERSION` and `MINOR_VERSION`
/// properties of cuBLAS and cuBLASLt.
fn ask(lib: &Loaded, library: Library, path: PathBuf) -> Option<Found> {
    let (mut major, mut minor) = (0, 0);
    let ok = match library {
        Library::Nvrtc => {
            type Get = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;
            let get: Get = lib.function(version_symbol(library))?;
            // SAFETY: NVRTC's C function, given two ints to write.
            unsafe { get(&mut major, &mut minor) == 0 }
        }
        Library::Cublas | Library::CublasLt => {
            type Get = unsafe extern "C" fn(c_int, *mut c_int) -> c_int;
            let get: Get = lib.function(version_symbol(library))?;
            // SAFETY: cuBLAS's C function; 0 and 1 are MAJOR_VERSION and MINOR_VERSION.
            unsafe { get(0, &mut major) == 0 && get(1, &mut minor) == 0 }
        }
    };
    ok.then_some(Found {
        library,
        version: Version {
            major: major as u32,
            minor: minor as u32,
        },
        path,
    })
}
