//! Per-device state of the layers above the registry (a device's memory, its driver, a simulated
//! device's streams), kept in one kind of map that owns the staleness check: every entry is
//! stamped with the `DeviceKind` its device had when it was made, and is made again once a change
//! of the stand-ins (`cuda::simulate`, `cuda::emulate`) has made the device another. A new piece
//! of per-device state is a `PerDevice`, and so cannot forget the check.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::kind::DeviceKind;
use super::registry::setting;
use super::value::Device;
use crate::device::error::Result;

/// State kept for one device by a layer above the registry, made for the `DeviceKind` the device
/// had then. Valid while the stand-in setting it was checked under is in force; after a change,
/// while the device is still of that kind (a stand-in the new setting keeps as it was, or a real
/// GPU). So a change of the stand-ins cannot leave a device's memory and its driver out of step:
/// each map finds its own entry stale and makes it again.
struct Stamped<T> {
    kind: DeviceKind,
    checked: u64,
    value: T,
}

impl<T> Stamped<T> {
    /// `value`, made for a device of `kind` under setting `seen`.
    fn new(kind: DeviceKind, seen: u64, value: T) -> Stamped<T> {
        Stamped {
            kind,
            checked: seen,
            value,
        }
    }

    /// Whether it was made or last checked under the setting in force.
    fn is_current(&self) -> bool {
        self.checked == setting()
    }

    /// Whether it is still the state of a device that is now of `kind` (read under setting
    /// `seen`); if so it is stamped with `seen`.
    fn confirm(&mut self, kind: DeviceKind, seen: u64) -> bool {
        let same = self.kind == kind;
        if same {
            self.checked = seen;
        }
        same
    }

    /// The kind it was made for.
    fn kind(&self) -> DeviceKind {
        self.kind
    }
}

/// A map from a device (its `Device`, or a GPU's index) to the state a layer keeps for it, each
/// entry `Stamped`. Its values are handles (`Arc`s, numbers): `get_or_make` hands out clones.
pub(crate) struct PerDevice<K, T> {
    map: OnceLock<Mutex<HashMap<K, Stamped<T>>>>,
    /// Held while an entry is made, outside the map's lock (making one may ask for another
    /// device's state, or free memory that asks for this map): one maker at a time, so a device's
    /// state (a GPU's context) is made once.
    making: Mutex<()>,
}

impl<K: Copy + Eq + Hash, T: Clone> PerDevice<K, T> {
    pub(crate) const fn new() -> Self {
        PerDevice {
            map: OnceLock::new(),
            making: Mutex::new(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, Stamped<T>>> {
        // A panic elsewhere never makes a device's state unreachable.
        let map = self.map.get_or_init(Default::default);
        map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state of `device` (kept under `key`): the entry made for it, while the device is of
    /// the kind it was made for; otherwise `make(kind)` makes it again, and an entry it replaces
    /// goes to `replaced`, outside every lock (giving its memory back may ask for the device).
    pub(crate) fn get_or_make(
        &self,
        key: K,
        device: Device,
        make: impl FnOnce(DeviceKind) -> Result<T>,
        replaced: impl FnOnce(T),
    ) -> Result<T> {
        if let Some(s) = self.lock().get(&key)
            && s.is_current()
        {
            return Ok(s.value.clone());
        }
        // Made under another stand-in setting, or not made: the device's kind is read outside
        // the map's lock, which `cuda::simulate` may wait for while it holds the setting's.
        let seen = setting();
        let kind = device.kind()?;
        let confirmed = |map: &mut HashMap<K, Stamped<T>>| {
            let s = map.get_mut(&key)?;
            s.confirm(kind, seen).then(|| s.value.clone())
        };
        if let Some(v) = confirmed(&mut self.lock()) {
            return Ok(v);
        }
        let making = self.making.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = confirmed(&mut self.lock()) {
            return Ok(v); // made by another thread meanwhile
        }
        let made = make(kind)?;
        let stale = self
            .lock()
            .insert(key, Stamped::new(kind, seen, made.clone()));
        drop(making);
        if let Some(stale) = stale {
            replaced(stale.value);
        }
        Ok(made)
    }

    /// The state kept for `key`, current or not, without making any (no device is probed).
    pub(crate) fn get(&self, key: &K) -> Option<T> {
        self.lock().get(key).map(|s| s.value.clone())
    }

    /// The keys with state, in no order.
    pub(crate) fn keys(&self) -> Vec<K> {
        self.lock().keys().copied().collect()
    }

    /// The states kept, current or not.
    pub(crate) fn values(&self) -> Vec<T> {
        self.lock().values().map(|s| s.value.clone()).collect()
    }

    /// Keeps the entries `keep(key, state)` accepts and returns the others, for the caller to
    /// drop outside the lock.
    pub(crate) fn retain(&self, mut keep: impl FnMut(&K, &T) -> bool) -> Vec<T> {
        let mut map = self.lock();
        let gone: Vec<K> = (map.iter())
            .filter(|(k, s)| !keep(k, &s.value))
            .map(|(k, _)| *k)
            .collect();
        gone.iter()
            .filter_map(|k| map.remove(k))
            .map(|s| s.value)
            .collect()
    }

    /// Forgets the entries of stand-ins that the setting in force made other devices (a real
    /// GPU's stays: its context is made once) and returns them, for the caller to drop outside
    /// the lock; `device_of` names each key's device.
    pub(crate) fn forget_stale(&self, device_of: impl Fn(K) -> Device) -> Vec<T> {
        let seen = setting();
        let mut map = self.lock();
        let mut gone = Vec::new();
        map.retain(|k, s| {
            let kept = s.kind() == DeviceKind::Gpu
                || device_of(*k).kind().is_ok_and(|now| s.confirm(now, seen));
            if !kept {
                gone.push(s.value.clone());
            }
            kept
        });
        gone
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::device::registry::SETTING;

    /// A device's state made under one stand-in setting is checked again after any change, and
    /// kept only while the device is of the kind it was made for. (Other tests may change the
    /// setting meanwhile: that only makes a stamp stale, which is what is asserted.)
    #[test]
    fn stamped_state_is_checked_again_after_a_change_and_kept_only_for_its_kind() {
        let kind = DeviceKind::EmulatedGpu { capacity: 1 };
        let mut state = Stamped::new(kind, setting(), "memory");
        SETTING.fetch_add(1, Ordering::Release);
        assert!(!state.is_current(), "made before the change");
        let now = setting();
        let other = DeviceKind::EmulatedGpu { capacity: 2 };
        assert!(
            !state.confirm(other, now),
            "another capacity is another device"
        );
        assert!(!state.is_current());
        assert!(state.confirm(kind, now), "the same kind keeps its state");
        assert_eq!(
            (state.checked, state.kind(), state.value),
            (now, kind, "memory")
        );
    }
}
