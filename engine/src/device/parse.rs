//! Reading a device from text: `"cpu"`, `"cuda"`, `"cuda:1"`.

use std::str::FromStr;

use super::Device;
use crate::device::error::{Error, Result};

/// Parses `"cpu"`, `"cuda"` (= `cuda:0`) and `"cuda:N"`, ignoring case and surrounding spaces.
impl FromStr for Device {
    type Err = Error;

    fn from_str(s: &str) -> Result<Device> {
        let t = s.trim().to_ascii_lowercase();
        let bad = || Error::DeviceParse {
            input: s.to_string(),
        };
        match t.as_str() {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => {
                let idx = t.strip_prefix("cuda:").ok_or_else(bad)?;
                if idx.is_empty() || !idx.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                idx.parse::<usize>().map(Device::Cuda).map_err(|_| bad())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_like_pytorch() {
        assert_eq!("cpu".parse::<Device>().unwrap(), Device::Cpu);
        assert_eq!("cuda".parse::<Device>().unwrap(), Device::Cuda(0));
        assert_eq!(" CUDA:1 ".parse::<Device>().unwrap(), Device::Cuda(1));
        assert_eq!(Device::Cuda(3).to_string(), "cuda:3");
        assert_eq!(Device::Cpu.to_string(), "cpu");
        for bad in [
            "", "cuda:", "cuda:-1", "cuda:x", "tpu", "cuda:1:2", "cuda 1",
        ] {
            let e = bad.parse::<Device>().unwrap_err();
            assert!(e.to_string().contains("\"cuda:N\""), "{bad}: {e}");
        }
    }
}
