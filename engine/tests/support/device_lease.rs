//! Which test of a binary uses which device. The tests of a binary run in parallel threads of one
//! process and share its devices, so a test that asserts exact byte counts on a device must be
//! the only one that touches it. Each test leases the devices it uses, `alone` where it counts
//! bytes and `shared` elsewhere; a clash fails the test that finds it, naming both tests.
//!
//! A lease lasts for the rest of the process, not just while its test runs: a clash is then
//! found whichever order the tests run in, one at a time or in parallel, instead of only when
//! two of them happen to overlap.

#![allow(dead_code)] // each test binary uses part of it

use std::sync::Mutex;

use placelab::Device;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Hold {
    Alone,
    Shared,
}

struct Lease {
    device: Device,
    test: String,
    hold: Hold,
}

static LEASES: Mutex<Vec<Lease>> = Mutex::new(Vec::new());

/// Leases `device` to the calling test alone (it asserts exact byte counts there): fails if
/// another test of this process has leased it, alone or shared, and makes any later lease of it
/// by another test fail.
pub fn alone(device: Device) {
    take(device, Hold::Alone);
}

/// Leases `devices` to the calling test, shared with other tests that share them: fails if
/// another test holds one of them alone.
pub fn shared(devices: &[Device]) {
    for &device in devices {
        take(device, Hold::Shared);
    }
}

fn take(device: Device, hold: Hold) {
    let test = calling_test();
    // A panicking test may have poisoned the lock; the list itself is always whole.
    let mut leases = LEASES.lock().unwrap_or_else(|e| e.into_inner());
    let clash = leases.iter().find(|l| {
        l.device == device && l.test != test && (l.hold == Hold::Alone || hold == Hold::Alone)
    });
    if let Some(other) = clash {
        let (owner, user) = if other.hold == Hold::Alone {
            (&other.test, &test)
        } else {
            (&test, &other.test)
        };
        panic!(
            "{device}: `{owner}` needs it alone (it counts the bytes there), but `{user}` uses \
             it too: give one of them another device"
        );
    }
    leases.push(Lease { device, test, hold });
}

/// The test running on this thread: the test harness names each test's thread after it.
fn calling_test() -> String {
    std::thread::current()
        .name()
        .expect("leases are taken on the test's own thread, which the harness names")
        .to_string()
}
