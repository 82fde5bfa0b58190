//! Which stream of each device the calling thread queues its work on, as PyTorch's
//! `torch.cuda.current_stream()`: per thread and per device, the device's default stream (0)
//! until `cuda::with_stream` makes another current for the length of its closure. Every layer
//! that queues work or takes memory reads it here: the drivers (which stream a kernel or copy
//! goes on) and the caching allocator (which stream's pool a block comes from).

use std::cell::RefCell;

use super::Device;

/// A stream of one device, numbered in the order the device made them; 0 is the default
/// stream, which every device has from the start.
pub type StreamId = u32;

/// The default stream's number.
pub const DEFAULT_STREAM: StreamId = 0;

/// Side streams per device: as PyTorch's `torch.cuda.Stream()` takes one of a pool of 32
/// (`kStreamsPerPool`), round robin, a device has at most this many besides its default stream,
/// and the 33rd stream asked for is the first again.
pub const STREAMS_PER_POOL: StreamId = 32;

/// The number of the `made`-th side stream asked of a device (0-based): 1 to
/// `STREAMS_PER_POOL`, round robin.
pub fn pool_slot(made: u64) -> StreamId {
    (made % u64::from(STREAMS_PER_POOL)) as StreamId + 1
}

thread_local! {
    /// (device, stream) pairs made current on this thread, innermost last; a device absent
    /// here queues on its default stream.
    static CURRENT: RefCell<Vec<(Device, StreamId)>> = const { RefCell::new(Vec::new()) };
}

/// The stream the calling thread queues `device`'s work on.
pub fn current(device: Device) -> StreamId {
    CURRENT.with(|c| {
        c.borrow()
            .iter()
            .rev()
            .find(|(d, _)| *d == device)
            .map_or(DEFAULT_STREAM, |(_, s)| *s)
    })
}

/// Makes `stream` current for `device` on this thread until the returned guard is dropped
/// (at the end of the scope, on a panic too), when the stream current before comes back.
pub fn make_current(device: Device, stream: StreamId) -> CurrentGuard {
    CURRENT.with(|c| c.borrow_mut().push((device, stream)));
    CurrentGuard {
        _not_send: std::marker::PhantomData,
    }
}

/// Restores the stream that was current before `make_current` (see there). Not `Send`: it
/// belongs to the thread whose state it changed.
pub struct CurrentGuard {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for CurrentGuard {
    fn drop(&mut self) {
        CURRENT.with(|c| c.borrow_mut().pop());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn side_streams_come_from_a_pool_of_32_round_robin() {
        assert_eq!((pool_slot(0), pool_slot(31), pool_slot(32)), (1, 32, 1));
    }

    #[test]
    fn a_scope_makes_its_stream_current_for_its_device_only_and_nests() {
        let (a, b) = (Device::Cuda(0), Device::Cuda(1));
        assert_eq!(current(a), DEFAULT_STREAM);
        {
            let _outer = make_current(a, 2);
            assert_eq!((current(a), current(b)), (2, DEFAULT_STREAM));
            {
                let _inner = make_current(a, 5);
                assert_eq!(current(a), 5);
            }
            assert_eq!(current(a), 2);
            let other_thread = std::thread::spawn(move || current(a)).join().unwrap();
            assert_eq!(
                other_thread, DEFAULT_STREAM,
                "the current stream is per thread"
            );
        }
        assert_eq!(current(a), DEFAULT_STREAM);
    }
}
