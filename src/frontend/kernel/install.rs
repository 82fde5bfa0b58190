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
        include_bytes!("../../../kernelspec/logo-32x32.png"),
    ),
    (
        "logo-64x64.png",
        include_bytes!("../../../kernelspec/logo-64x64.png"),
    ),
    (
        "logo-svg.svg",
        include_bytes!("../../../kernelspec/logo-svg.svg"),
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

/// Writes the kernelspec; returns its folder.
pub fn install(
    place: &Place,
    name: &str,
    display_name: &str,
    env: &[(String, String)],
) -> Result<PathBuf, String> {
    check_name(name)?;
    let exe = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .map_err(|e| format!("cannot find the placelab binary's own path: {e}"))?;
    let dir = kernels_dir(place)?.join(name);
    let write = |file: &str, bytes: &[u8]| {
        std::fs::write(dir.join(file), bytes)
            .map_err(|e| format!("cannot write {}: {e}", dir.join(file).display()))
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    write(
        "kernel.json",
        kernel_json(&exe, display_name, env).as_bytes(),
    )?;
    for (file, bytes) in LOGOS {
        write(file, bytes)?;
    }
    Ok(dir)
}

/// Removes the kernelspec; returns the folder it removed.
pub fn uninstall(place: &Place, name: &str) -> Result<PathBuf, String> {
    check_name(name)?;
    let dir = kernels_dir(place)?.join(name);
    if !dir.join("kernel.json").exists() {
        return Err(format!(
            "no kernel named {name:?} is installed in {} (`jupyter kernelspec list` shows where kernels are)",
            dir.parent().unwrap_or(&dir).display()
        ));
    }
    std::fs::remove_dir_all(&dir).map_err(|e| format!("cannot remove {}: {e}", dir.display()))?;
    Ok(dir)
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
        uninstall(&place, "placelab-test").unwrap();
        assert!(!dir.exists());
        let again = uninstall(&place, "placelab-test").unwrap_err();
        assert!(again.contains("no kernel named"), "{again}");
        let _ = std::fs::remove_dir_all(prefix);
    }
}
