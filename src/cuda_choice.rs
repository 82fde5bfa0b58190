//! Which CUDA major the engine is built for on this machine. cudarc fixes the major at compile
//! time, and a build loads only that major's NVRTC and cuBLAS; the engine is compiled on the
//! learner's machine at the first session anyway, so the session chooses there, from what a
//! child process found (`cuda_probe`: the driver's CUDA version, the GPUs' compute capability,
//! and each NVRTC and cuBLAS library with its own version). This file is the choice alone: no
//! CUDA is loaded here, and the tests give it made-up probes.

use std::path::PathBuf;

use placelab::cuda::cuda_major::{install_hint, pip_install};

/// The majors placelab's bindings exist for, the newest first.
pub const MAJORS: [u32; 2] = [13, 12];

/// `12.8`, a CUDA version; or a compute capability, `9.0`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The libraries the engine's GPU path loads, besides the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Library {
    Nvrtc,
    Cublas,
    CublasLt,
}

impl Library {
    pub const ALL: [Library; 3] = [Library::Nvrtc, Library::Cublas, Library::CublasLt];

    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Library::Nvrtc => "NVRTC",
            Library::Cublas => "cuBLAS",
            Library::CublasLt => "cuBLASLt",
        }
    }

    /// Its file name up to the major: `libnvrtc.so.` (then `12`, or `12.8.93`).
    pub fn file_prefix(self) -> &'static str {
        match self {
            Library::Nvrtc => "libnvrtc.so.",
            Library::Cublas => "libcublas.so.",
            Library::CublasLt => "libcublasLt.so.",
        }
    }
}

/// One library file the probe loaded, and the version it reported.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Found {
    pub library: Library,
    pub version: Version,
    pub path: PathBuf,
}

/// What the child process found. `found` is in the order of preference: the folders of
/// `PLACELAB_CUDA_LIB_DIRS`, then Python's NVIDIA wheels, then a CUDA toolkit, then the loader's
/// own path.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Probe {
    /// The CUDA version the driver supports (`cuDriverGetVersion`), or why there is none.
    pub driver: Result<Version, String>,
    /// The compute capability of the oldest GPU, when the driver could list them.
    pub oldest_gpu: Option<Version>,
    pub found: Vec<Found>,
}

/// What the session builds the engine for.
#[derive(Debug, Clone, PartialEq)]
pub enum Choice {
    /// No NVIDIA driver (or CUDA is turned off): the default build, and tensors stay on the CPU
    /// or on stand-in devices.
    NoDriver { why: String },
    /// The engine is built for `major`, and uses these libraries (one of each `Library`).
    Major {
        major: u32,
        driver: Version,
        libraries: Vec<Found>,
    },
    /// A driver, but no major that fits it and the libraries: the default build, no GPU, and
    /// `why` (with the fix) for `:devices` and the first GPU use.
    Unusable { driver: Version, why: String },
}

impl Choice {
    /// The major the engine is built for: the chosen one, else the default (13).
    pub fn major(&self) -> u32 {
        match self {
            Choice::Major { major, .. } => *major,
            Choice::NoDriver { .. } | Choice::Unusable { .. } => MAJORS[0],
        }
    }

    /// One line for `placelab devices`: what was chosen and why.
    pub fn summary(&self) -> String {
        match self {
            Choice::NoDriver { why } => format!("no CUDA: {why}"),
            Choice::Unusable { why, .. } => format!("no CUDA: {why}"),
            Choice::Major {
                major,
                driver,
                libraries,
            } => {
                let libs: Vec<String> = libraries
                    .iter()
                    .map(|f| format!("{} {} ({})", f.library.name(), f.version, f.path.display()))
                    .collect();
                format!(
                    "the engine is built for CUDA {major}: driver {driver}, {}",
                    libs.join(", ")
                )
            }
        }
    }
}

/// The oldest compute capability CUDA 13's NVRTC compiles for (it dropped Maxwell, Pascal and
/// Volta).
const CUDA_13_OLDEST_GPU: Version = Version { major: 7, minor: 5 };

/// The newest major the driver allows whose NVRTC, cuBLAS and cuBLASLt were all found (the first
/// of each in the probe's order), and that compiles for the oldest GPU; else why none fits.
pub fn choose(probe: &Probe) -> Choice {
    let driver = match &probe.driver {
        Ok(v) => *v,
        Err(why) => return Choice::NoDriver { why: why.clone() },
    };
    for major in MAJORS.into_iter().filter(|&m| m <= driver.major) {
        let Some(libraries) = full_set(probe, major) else {
            continue;
        };
        if major >= 13 && probe.oldest_gpu.is_some_and(|cc| cc < CUDA_13_OLDEST_GPU) {
            continue;
        }
        return Choice::Major {
            major,
            driver,
            libraries,
        };
    }
    Choice::Unusable {
        driver,
        why: why_none_fits(probe, driver),
    }
}

/// The first library of each kind of `major`, if every kind was found.
fn full_set(probe: &Probe, major: u32) -> Option<Vec<Found>> {
    Library::ALL
        .iter()
        .map(|&lib| {
            probe
                .found
                .iter()
                .find(|f| f.library == lib && f.version.major == major)
                .cloned()
        })
        .collect()
}

/// The majors of which any library was found, the newest first.
fn majors_found(probe: &Probe) -> Vec<u32> {
    let mut majors: Vec<u32> = probe.found.iter().map(|f| f.version.major).collect();
    majors.sort_unstable_by(|a, b| b.cmp(a));
    majors.dedup();
    majors
}

/// What was found, for a message: `NVRTC 12.4 (/usr/lib/libnvrtc.so.12), cuBLAS 13.0 (…)`.
fn listed(probe: &Probe) -> String {
    let said: Vec<String> = probe
        .found
        .iter()
        .map(|f| format!("{} {} ({})", f.library.name(), f.version, f.path.display()))
        .collect();
    said.join(", ")
}

/// Why no major fits, and the fix, in words for `:devices`.
fn why_none_fits(probe: &Probe, driver: Version) -> String {
    let newest_allowed = MAJORS.into_iter().find(|&m| m <= driver.major);
    let Some(allowed) = newest_allowed else {
        return format!(
            "the NVIDIA driver supports CUDA {driver}, and placelab needs CUDA 12 or newer: \
             update the driver (R535 or newer for CUDA 12, R580 or newer for CUDA 13)"
        );
    };
    let found = majors_found(probe);
    if found.is_empty() {
        return format!(
            "the NVIDIA driver supports CUDA {driver}, and no NVRTC or cuBLAS was found: {}",
            install_hint(allowed)
        );
    }
    if let Some(cc) = probe.oldest_gpu
        && cc < CUDA_13_OLDEST_GPU
        && full_set(probe, 13).is_some()
    {
        return format!(
            "this machine's GPU (compute capability {cc}) is older than CUDA 13 compiles for \
             ({CUDA_13_OLDEST_GPU} and newer), and only CUDA 13's libraries were found: {}",
            install_hint(12)
        );
    }
    if found.iter().all(|&m| m > driver.major) {
        let newer = found[0];
        return format!(
            "the NVIDIA driver supports CUDA {driver}, and the libraries found are CUDA \
             {newer}'s ({}): install CUDA {allowed}'s (`{}`), or update the driver (R580 or \
             newer for CUDA 13)",
            listed(probe),
            pip_install(allowed)
        );
    }
    format!(
        "no CUDA major has all of NVRTC, cuBLAS and cuBLASLt here (found: {}); one major's full \
         set is needed, e.g. CUDA {allowed}'s: `{}`",
        listed(probe),
        pip_install(allowed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u32, minor: u32) -> Version {
        Version { major, minor }
    }

    /// NVRTC, cuBLAS and cuBLASLt of `version`, as a wheel folder of that major holds them.
    fn set(version: Version) -> Vec<Found> {
        Library::ALL
            .iter()
            .map(|&library| Found {
                library,
                version,
                path: format!(
                    "/wheels/cu{}/{}{}",
                    version.major,
                    library.file_prefix(),
                    version.major
                )
                .into(),
            })
            .collect()
    }

    fn probe(driver: Version, found: Vec<Found>) -> Probe {
        Probe {
            driver: Ok(driver),
            oldest_gpu: Some(v(9, 0)),
            found,
        }
    }

    fn chosen(p: &Probe) -> (u32, Vec<Found>) {
        match choose(p) {
            Choice::Major {
                major, libraries, ..
            } => (major, libraries),
            other => panic!("no major chosen: {other:?}"),
        }
    }

    fn refused(p: &Probe) -> String {
        match choose(p) {
            Choice::Unusable { why, .. } => why,
            other => panic!("a major was chosen: {other:?}"),
        }
    }

    #[test]
    fn a_cuda_12_2_driver_with_cu12_libraries_gets_a_cuda_12_engine() {
        let (major, libs) = chosen(&probe(v(12, 2), set(v(12, 2))));
        assert_eq!(major, 12);
        assert_eq!(libs, set(v(12, 2)));
    }

    #[test]
    fn a_cuda_13_driver_with_cu13_libraries_gets_a_cuda_13_engine() {
        assert_eq!(chosen(&probe(v(13, 0), set(v(13, 0)))).0, 13);
        // Both sets present: the newest the driver allows.
        let both = [set(v(12, 8)), set(v(13, 0))].concat();
        assert_eq!(chosen(&probe(v(13, 0), both.clone())).0, 13);
        // A CUDA 12 driver with both: 12, whichever came first.
        assert_eq!(chosen(&probe(v(12, 8), both)).0, 12);
    }

    #[test]
    fn a_cuda_12_8_driver_with_only_cu13_libraries_is_told_what_to_install() {
        let why = refused(&probe(v(12, 8), set(v(13, 0))));
        assert!(why.contains("supports CUDA 12.8"), "{why}");
        assert!(why.contains("CUDA 13's"), "{why}");
        assert!(why.contains(&pip_install(12)), "{why}");
        assert!(why.contains("R580"), "{why}");
    }

    #[test]
    fn no_driver_builds_the_default_engine_and_says_why() {
        let p = Probe {
            driver: Err("no NVIDIA driver found (libcuda.so.1 is not installed)".into()),
            oldest_gpu: None,
            found: set(v(12, 4)),
        };
        let c = choose(&p);
        assert_eq!(c.major(), 13);
        assert!(matches!(&c, Choice::NoDriver { why } if why.contains("libcuda.so.1")));
    }

    #[test]
    fn libraries_of_mixed_majors_are_named_with_a_full_set_to_install() {
        let mut found = set(v(12, 4));
        found.retain(|f| f.library == Library::Nvrtc);
        found.extend(
            set(v(13, 0))
                .into_iter()
                .filter(|f| f.library != Library::Nvrtc),
        );
        let why = refused(&probe(v(13, 0), found));
        assert!(
            why.contains("NVRTC 12.4 (/wheels/cu12/libnvrtc.so.12)"),
            "{why}"
        );
        assert!(why.contains("cuBLAS 13.0"), "{why}");
        assert!(why.contains("full set"), "{why}");
        assert!(why.contains(&pip_install(13)), "{why}");
    }

    #[test]
    fn an_old_driver_or_no_libraries_names_the_fix() {
        let why = refused(&probe(v(11, 8), set(v(12, 0))));
        assert!(
            why.contains("supports CUDA 11.8") && why.contains("update the driver"),
            "{why}"
        );
        let why = refused(&probe(v(12, 4), Vec::new()));
        assert!(why.contains("no NVRTC or cuBLAS was found"), "{why}");
        assert!(why.contains(&pip_install(12)), "{why}");
    }

    #[test]
    fn a_gpu_older_than_cuda_13_compiles_for_uses_cuda_12() {
        let old_gpu = |found| Probe {
            oldest_gpu: Some(v(7, 0)),
            ..probe(v(13, 0), found)
        };
        assert_eq!(
            chosen(&old_gpu([set(v(13, 0)), set(v(12, 9))].concat())).0,
            12
        );
        let why = refused(&old_gpu(set(v(13, 0))));
        assert!(why.contains("compute capability 7.0"), "{why}");
        assert!(why.contains(&pip_install(12)), "{why}");
    }

    #[test]
    fn the_first_library_found_of_a_major_is_the_one_used() {
        let mut found = set(v(12, 8));
        found.insert(
            0,
            Found {
                library: Library::Nvrtc,
                version: v(12, 4),
                path: "/chosen/libnvrtc.so.12".into(),
            },
        );
        let (_, libs) = chosen(&probe(v(12, 8), found));
        assert_eq!(libs[0].path, PathBuf::from("/chosen/libnvrtc.so.12"));
    }
}
