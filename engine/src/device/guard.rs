//! The panic guard around cudarc's loader: cudarc panics (rather than returning an error) when
//! libcuda, NVRTC or cuBLAS is missing or lacks a symbol, and the engine must never panic for
//! that.

/// Runs `f`, turning a panic of cudarc's loader (a library that is missing or lacks a symbol)
/// into an error instead of unwinding through the caller.
pub(crate) fn guarded<R>(what: &str, f: impl FnOnce() -> R) -> std::result::Result<R, String> {
    catch_quietly(f).map_err(|msg| format!("{what}: {msg}"))
}

/// Runs `f`, catching a panic without printing it: `Err` holds the panic's message. A panic
/// on another thread meanwhile prints as usual.
pub(crate) fn catch_quietly<R>(f: impl FnOnce() -> R) -> std::result::Result<R, String> {
    thread_local! {
        static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    // One hook for the whole process, installed once, that stays silent only on a thread inside
    // `guarded`: swapping the process-wide hook per call would race between threads and could
    // leave every later panic silent.
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(|q| q.get()) {
                previous(info);
            }
        }));
    });
    let was_quiet = QUIET.with(|q| q.replace(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was_quiet));
    r.map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}
