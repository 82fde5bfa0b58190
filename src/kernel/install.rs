//! `placelab install-kernel` / `uninstall-kernel`: the kernelspec (`kernel.json` and logos)
//! that JupyterLab, Notebook, `jupyter console`, nbconvert, nbclient and papermill find by name.

use std::path::{Path, PathBuf};

/// Where a kernelspec goes, as `jupyter kernelspec install` names the places.
#[derive(Debug, Clone, PartialEq)]
pub enum Place {
    /// The user's Jupyter data directory (`$JUPYTER_DATA_DIR`, else the platform's).
    User,
    /// The active Python environment (`$VIRTUAL_ENV`, `$CONDA_PREFIX`, else python3's prefix).
    SysPrefix,
    /// `PREFIX/share/jupyter/kernels`.
    Prefix(PathBuf),
}

const LOGOS: [(&str, &[u8]); 3] = [
    (
        "logo-32x32.png",
        include_bytes!("../../kernelspec/logo-32x32.png"),
    ),
    (
        "logo-64x64.png",
        include_bytes!("../../kernelspec/logo-64x64.png"),
    ),
    (
        "logo-svg.svg",
        include_bytes!("../../kernelspec/logo-svg.svg"),
    ),
];

/// The folder holding every kernelspec at `place`.
pub fn kernels_dir(place: &Place) -> Result<PathBuf, String> {
    let data = match place {
        Place::Prefix(p) => p.join("share").join("jupyter"),
        Place::User => match std::env::var_os("JUPYTER_DATA_DIR") {
            Some(d) => PathBuf::from(d),
            None => jupyter_zmq_client::user_data_dir().map_err(|e| {
                format!("cannot find your Jupyter data directory ({e}); use --prefix")
            })?,
        },
        Place::SysPrefix => python_prefix()?.join("share").join("jupyter"),
    };
    Ok(data.join("kernels"))
}

fn python_prefix() -> Result<PathBuf, String> {
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(p) = std::env::var_os(var) {
            return Ok(PathBuf::from(p));
        }
    }
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.prefix)"])
        .output()
        .map_err(|e| {
            format!("--sys-prefix asks python3 for its prefix, and it could not run: {e}")
        })?;
    let prefix = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || prefix.is_empty() {
        return Err("python3 did not say its prefix; use --prefix".into());
    }
    Ok(PathBuf::from(prefix))
}

fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} cannot be a kernel name: use letters, digits, '.', '_' and '-'"
        ))
    }
}

/// The `kernel.json` that starts this binary as a kernel.
pub fn kernel_json(exe: &Path, display_name: &str, env: &[(String, String)]) -> String {
    let env: serde_json::Map<String, serde_json::Value> = env
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    let spec = serde_json::json!({
        "argv": [exe.to_string_lossy(), "kernel", "--connection-file", "{connection_file}"],
        "display_name": display_name,
        "language": "rust",
        // Interrupts come as messages on the control channel: a cell is stopped, not the kernel.
        "interrupt_mode": "message",
        "env": env,
        "metadata": { "debugger": false },
    });
    serde_json::to_string_pretty(&spec).unwrap_or_default()
}

/// In a kernelspec folder: the folders above it that `install` created, deepest last, so that
/// `uninstall` removes them again (Jupyter reads only `kernel.json` and the logos).
pub const RECORD: &str = "placelab-install.json";

/// This binary's own path, as a kernelspec names it.
fn own_path() -> Result<PathBuf, String> {
    std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .map_err(|e| format!("cannot find the placelab binary's own path: {e}"))
}

/// `path` made absolute (from the working directory), as the record holds it.
fn absolute(path: &Path) -> Result<PathBuf, String> {
    std::path::absolute(path).map_err(|e| format!("cannot make {} absolute: {e}", path.display()))
}

/// The folders `RECORD` in `dir` lists; none without one (an install by an older placelab).
fn recorded(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_to_string(dir.join(RECORD))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|record| {
            let list = record.get("created")?.as_array()?.clone();
            Some(
                list.iter()
                    .filter_map(|p| p.as_str().map(PathBuf::from))
                    .collect(),
            )
        })
        .unwrap_or_default()
}

/// Writes the kernelspec; returns its folder.
pub fn install(
    place: &Place,
    name: &str,
    display_name: &str,
    env: &[(String, String)],
) -> Result<PathBuf, String> {
    check_name(name)?;
    let exe = own_path()?;
    let dir = kernels_dir(place)?.join(name);
    // Each file whole or not at all (written beside, then renamed over): a Jupyter reading the
    // kernelspec while it is installed again never finds half a `kernel.json`.
    let write = |file: &str, bytes: &[u8]| {
        let (to, part) = (
            dir.join(file),
            dir.join(format!(".{file}.{}", std::process::id())),
        );
        std::fs::write(&part, bytes)
            .and_then(|()| std::fs::rename(&part, &to))
            .map_err(|e| format!("cannot write {}: {e}", to.display()))
    };
    // The folders above the kernelspec that are not there yet: create_dir_all makes them.
    let abs = absolute(&dir)?;
    let mut created: Vec<PathBuf> = abs
        .ancestors()
        .skip(1)
        .take_while(|a| std::fs::symlink_metadata(a).is_err())
        .map(Path::to_path_buf)
        .collect();
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // What an earlier install made is still to be removed, by whichever kernelspec goes last:
    // this one's own record (installed again over itself), and its neighbours' in `kernels/`.
    let neighbours = std::fs::read_dir(abs.parent().unwrap_or(&abs))
        .into_iter()
        .flatten()
        .filter_map(|entry| Some(entry.ok()?.path()));
    for old in neighbours.flat_map(|spec| recorded(&spec)) {
        if abs.ancestors().skip(1).any(|a| a == old) && !created.contains(&old) {
            created.push(old);
        }
    }
    created.sort_by_key(|p| p.components().count());
    write(
        "kernel.json",
        kernel_json(&exe, display_name, env).as_bytes(),
    )?;
    for (file, bytes) in LOGOS {
        write(file, bytes)?;
    }
    let record = serde_json::json!({
        "about": "the folders placelab install-kernel created above this kernelspec, deepest \
                  last; placelab uninstall-kernel removes each one that is empty",
        "created": created.iter().map(|p| p.to_string_lossy()).collect::<Vec<_>>(),
    });
    write(
        RECORD,
        serde_json::to_string_pretty(&record)
            .unwrap_or_default()
            .as_bytes(),
    )?;
    Ok(dir)
}

/// What to tell someone who just installed the kernelspec at `place`: how Jupyter finds it, and
/// (a binary under cargo's `target/`) that the kernelspec points at a build `cargo clean` removes.
pub fn how_jupyter_finds_it(place: &Place, display_name: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let data = kernels_dir(place)
        .ok()
        .and_then(|k| absolute(k.parent()?).ok());
    match (place, data) {
        (Place::Prefix(_), Some(data)) if !jupyter_looks_in(&data) => {
            let listed = std::env::var_os("JUPYTER_PATH").filter(|p| !p.is_empty());
            lines.push(format!(
                "Jupyter looks in a --prefix only when told: open a notebook with\n  \
                 JUPYTER_PATH={}{} jupyter lab\nand pick \"{display_name}\"",
                shell_word(&data.to_string_lossy()),
                if listed.is_some() {
                    ":$JUPYTER_PATH"
                } else {
                    ""
                }
            ));
        }
        _ => lines.push(format!(
            "open a notebook with `jupyter lab` and pick \"{display_name}\""
        )),
    }
    if let Ok(exe) = own_path()
        && is_cargo_build(&exe)
    {
        lines.push(format!(
            "note: it runs {}, a cargo build that `cargo clean` would delete;\n\
             for a path that stays: `cargo install --locked --path .`, then `placelab install-kernel`",
            exe.display()
        ));
    }
    lines
}

/// Whether Jupyter searches the data folder `data` unasked: `$JUPYTER_PATH` lists it, or it is
/// one of the system's (`/usr/local/share/jupyter`, `/usr/share/jupyter`).
fn jupyter_looks_in(data: &Path) -> bool {
    let same = |p: &Path| {
        p == data
            || matches!(
                (p.canonicalize(), data.canonicalize()),
                (Ok(a), Ok(b)) if a == b
            )
    };
    let listed = std::env::var_os("JUPYTER_PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|p| same(&p)));
    listed
        || ["/usr/local/share/jupyter", "/usr/share/jupyter"]
            .iter()
            .any(|p| same(Path::new(p)))
}

/// Whether `exe` is cargo's output: its path has `target/debug` or `target/release` in it.
fn is_cargo_build(exe: &Path) -> bool {
    let parts: Vec<_> = exe.components().map(|c| c.as_os_str()).collect();
    parts
        .windows(2)
        .any(|w| w[0] == "target" && (w[1] == "debug" || w[1] == "release"))
}

/// `text` as one shell word: as it is when nothing in it is special, else single-quoted.
fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,:@%=".contains(c));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// Removes the kernelspec, then each folder above it that `install` created and that is now
/// empty, deepest first (never one that holds anything, never one install did not make).
/// Returns what it removed, the kernelspec's folder first.
pub fn uninstall(place: &Place, name: &str) -> Result<Vec<PathBuf>, String> {
    check_name(name)?;
    let dir = kernels_dir(place)?.join(name);
    if !dir.join("kernel.json").exists() {
        return Err(format!(
            "no kernel named {name:?} is installed in {} (`jupyter kernelspec list` shows where kernels are)",
            dir.parent().unwrap_or(&dir).display()
        ));
    }
    let mut created = recorded(&dir);
    // Only folders above this kernelspec, where it is now (a moved prefix leaves the old paths).
    let abs = absolute(&dir)?;
    created.retain(|p| abs.ancestors().skip(1).any(|a| a == p));
    created.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    std::fs::remove_dir_all(&dir).map_err(|e| format!("cannot remove {}: {e}", dir.display()))?;
    let mut removed = vec![dir];
    for folder in created {
        if std::fs::symlink_metadata(&folder).is_err() {
            continue;
        }
        // remove_dir removes empty folders only; one that holds something keeps its parents.
        match std::fs::remove_dir(&folder) {
            Ok(()) => removed.push(folder),
            Err(_) => break,
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_writes_a_kernelspec_with_message_interrupts_and_uninstall_removes_it() {
        let prefix = std::env::temp_dir().join(format!("placelab-spec-{}", std::process::id()));
        let place = Place::Prefix(prefix.clone());
        let env = [("PLACELAB_SIMULATE_CUDA".to_string(), "1".to_string())];
        let dir = install(&place, "placelab-test", "Rust (placelab)", &env).unwrap();
        assert_eq!(dir, prefix.join("share/jupyter/kernels/placelab-test"));
        let spec: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("kernel.json")).unwrap())
                .unwrap();
        assert_eq!(spec["interrupt_mode"], "message");
        assert_eq!(spec["language"], "rust");
        assert_eq!(spec["argv"][1], "kernel");
        assert_eq!(spec["argv"][3], "{connection_file}");
        assert_eq!(spec["env"]["PLACELAB_SIMULATE_CUDA"], "1");
        assert!(Path::new(spec["argv"][0].as_str().unwrap()).is_absolute());
        assert!(dir.join("logo-64x64.png").exists());
        assert!(install(&place, "bad name", "x", &[]).is_err());
        let removed = uninstall(&place, "placelab-test").unwrap();
        assert!(!dir.exists());
        // The prefix did not exist: install made it and every folder down to the kernelspec.
        assert_eq!(removed[0], dir);
        assert_eq!(removed.last(), Some(&absolute(&prefix).unwrap()));
        assert!(!prefix.exists());
        let again = uninstall(&place, "placelab-test").unwrap_err();
        assert!(again.contains("no kernel named"), "{again}");
        let _ = std::fs::remove_dir_all(prefix);
    }

    #[test]
    fn uninstall_removes_the_folders_install_made_whichever_kernelspec_goes_last() {
        let prefix = std::env::temp_dir().join(format!("placelab-spec-two-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&prefix);
        // The prefix and a file in it were there before: they stay.
        std::fs::create_dir_all(prefix.join("share")).unwrap();
        std::fs::write(prefix.join("share/kept.txt"), "mine").unwrap();
        let place = Place::Prefix(prefix.clone());
        install(&place, "first", "First", &[]).unwrap();
        install(&place, "second", "Second", &[]).unwrap();
        // Installing again over itself forgets nothing.
        install(&place, "first", "First", &[]).unwrap();
        let first = uninstall(&place, "first").unwrap();
        assert_eq!(
            first.len(),
            1,
            "the second kernelspec still fills kernels/: {first:?}"
        );
        let second = uninstall(&place, "second").unwrap();
        let abs = absolute(&prefix).unwrap();
        assert_eq!(
            second[1..],
            [abs.join("share/jupyter/kernels"), abs.join("share/jupyter")]
        );
        assert_eq!(
            std::fs::read_to_string(prefix.join("share/kept.txt")).unwrap(),
            "mine"
        );
        let _ = std::fs::remove_dir_all(prefix);
    }

    #[test]
    fn a_binary_under_target_is_a_cargo_build() {
        assert!(is_cargo_build(Path::new(
            "/src/placelab/target/debug/placelab"
        )));
        assert!(is_cargo_build(Path::new(
            "/src/placelab/target/release/placelab"
        )));
        assert!(!is_cargo_build(Path::new("/home/me/.cargo/bin/placelab")));
        assert!(!is_cargo_build(Path::new("/srv/target/placelab")));
        assert_eq!(shell_word("/tmp/x/share/jupyter"), "/tmp/x/share/jupyter");
        assert_eq!(shell_word("/tmp/my dir's"), "'/tmp/my dir'\\''s'");
    }
}
