//! [`DeviceMap`]: which physical GPU each logical [`DeviceId`] runs on.
//!
//! The core addresses ranks by `DeviceId`. The user says which GPU (CUDA ordinal) each one uses;
//! several ids may share a GPU ("logical ranks"): each gets its own stream, its own buffers and,
//! where the driver allows, its own context, so a one-GPU machine exercises the same peer-copy and
//! event path as a multi-GPU one. (NCCL refuses two ranks on one GPU; this executor does not.)

use ruccl_core::DeviceId;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

/// A malformed device map, or one that names a GPU the machine lacks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceMapError {
    /// The map has no devices.
    #[error("the device map is empty")]
    Empty,
    /// A logical device was given twice.
    #[error("{device} appears twice in the device map")]
    DuplicateDevice {
        /// The repeated device.
        device: DeviceId,
    },
    /// More logical devices were asked for than `DeviceId` can number.
    #[error("{count} logical devices do not fit in a DeviceId")]
    TooManyDevices {
        /// The count asked for.
        count: usize,
    },
    /// A logical device maps to a GPU ordinal this machine does not have.
    #[error("{device} maps to GPU {ordinal}, but this machine has {available} GPU(s)")]
    OrdinalOutOfRange {
        /// The logical device.
        device: DeviceId,
        /// The ordinal it maps to.
        ordinal: usize,
        /// How many GPUs the driver reports.
        available: usize,
    },
    /// Text given to [`DeviceMap::from_str`] is not `device:ordinal[,device:ordinal...]`.
    #[error("cannot parse device map `{text}`: {reason}")]
    Parse {
        /// The text.
        text: String,
        /// What is wrong.
        reason: &'static str,
    },
}

/// Logical device → physical GPU ordinal. Never empty; each device appears once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceMap {
    /// Invariant: non-empty.
    entries: BTreeMap<DeviceId, usize>,
}

impl DeviceMap {
    /// A map from explicit `(device, ordinal)` pairs.
    pub fn new(pairs: impl IntoIterator<Item = (DeviceId, usize)>) -> Result<Self, DeviceMapError> {
        let mut entries = BTreeMap::new();
        for (device, ordinal) in pairs {
            if entries.insert(device, ordinal).is_some() {
                return Err(DeviceMapError::DuplicateDevice { device });
            }
        }
        if entries.is_empty() {
            return Err(DeviceMapError::Empty);
        }
        Ok(Self { entries })
    }

    /// Device `i` on GPU `i`, for `i` in `0..count`: one rank per GPU.
    pub fn one_per_gpu(count: usize) -> Result<Self, DeviceMapError> {
        Self::new(ids(count)?.map(|device| (device, device.index() as usize)))
    }

    /// Devices `0..ranks`, all on GPU `ordinal`: logical ranks on one GPU.
    pub fn logical(ordinal: usize, ranks: usize) -> Result<Self, DeviceMapError> {
        Self::new(ids(ranks)?.map(|device| (device, ordinal)))
    }

    /// Devices `0..ranks`, dealt round-robin over `ordinals` (device `i` on
    /// `ordinals[i % ordinals.len()]`).
    pub fn round_robin(ranks: usize, ordinals: &[usize]) -> Result<Self, DeviceMapError> {
        if ordinals.is_empty() {
            return Err(DeviceMapError::Empty);
        }
        Self::new(
            ids(ranks)?
                .zip(ordinals.iter().cycle())
                .map(|(device, &ordinal)| (device, ordinal)),
        )
    }

    /// The GPU ordinal `device` runs on, if it is in the map.
    pub fn ordinal(&self, device: DeviceId) -> Option<usize> {
        self.entries.get(&device).copied()
    }

    /// The logical devices, in increasing order.
    pub fn devices(&self) -> impl ExactSizeIterator<Item = DeviceId> + '_ {
        self.entries.keys().copied()
    }

    /// `(device, ordinal)` pairs, in increasing device order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (DeviceId, usize)> + '_ {
        self.entries
            .iter()
            .map(|(&device, &ordinal)| (device, ordinal))
    }

    /// The distinct GPU ordinals used, in increasing order.
    pub fn ordinals(&self) -> BTreeSet<usize> {
        self.entries.values().copied().collect()
    }

    /// The logical devices on GPU `ordinal`, in increasing order.
    pub fn devices_on(&self, ordinal: usize) -> Vec<DeviceId> {
        self.iter()
            .filter(|&(_, gpu)| gpu == ordinal)
            .map(|(device, _)| device)
            .collect()
    }

    /// Number of logical devices (at least one).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Always `false`: a map has at least one device. Present for API symmetry with `len`.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Check every ordinal against the number of GPUs the driver reports.
    pub fn check_ordinals(&self, available: usize) -> Result<(), DeviceMapError> {
        match self.iter().find(|&(_, ordinal)| ordinal >= available) {
            Some((device, ordinal)) => Err(DeviceMapError::OrdinalOutOfRange {
                device,
                ordinal,
                available,
            }),
            None => Ok(()),
        }
    }
}

fn ids(count: usize) -> Result<impl Iterator<Item = DeviceId>, DeviceMapError> {
    let count = u32::try_from(count).map_err(|_| DeviceMapError::TooManyDevices { count })?;
    Ok((0..count).map(DeviceId::new))
}

impl fmt::Display for DeviceMap {
    /// `device:ordinal` pairs separated by commas, e.g. `0:0,1:0,2:1` (what `from_str` reads).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (position, (device, ordinal)) in self.iter().enumerate() {
            if position > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}:{ordinal}", device.index())?;
        }
        Ok(())
    }
}

impl FromStr for DeviceMap {
    type Err = DeviceMapError;

    /// Reads `device:ordinal` pairs separated by commas (`0:0,1:0,2:1`), whitespace allowed.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let parse_error = |reason| DeviceMapError::Parse {
            text: text.to_owned(),
            reason,
        };
        let mut pairs = Vec::new();
        for item in text
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
        {
            let (device, ordinal) = item
                .split_once(':')
                .ok_or_else(|| parse_error("each entry must be `device:ordinal`"))?;
            let device = device
                .trim()
                .parse::<u32>()
                .map_err(|_| parse_error("a device must be a non-negative integer"))?;
            let ordinal = ordinal
                .trim()
                .parse::<usize>()
                .map_err(|_| parse_error("an ordinal must be a non-negative integer"))?;
            pairs.push((DeviceId::new(device), ordinal));
        }
        Self::new(pairs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(index: u32) -> DeviceId {
        DeviceId::new(index)
    }

    #[test]
    fn an_empty_map_is_rejected() {
        assert_eq!(DeviceMap::new([]), Err(DeviceMapError::Empty));
        assert_eq!(DeviceMap::logical(0, 0), Err(DeviceMapError::Empty));
        assert_eq!(DeviceMap::round_robin(4, &[]), Err(DeviceMapError::Empty));
    }

    #[test]
    fn a_repeated_device_is_rejected_even_on_the_same_gpu() {
        assert_eq!(
            DeviceMap::new([(id(1), 0), (id(2), 0), (id(1), 0)]),
            Err(DeviceMapError::DuplicateDevice { device: id(1) })
        );
    }

    #[test]
    fn logical_ranks_share_one_ordinal() {
        let map = DeviceMap::logical(3, 4).unwrap();
        assert_eq!(map.len(), 4);
        assert_eq!(map.ordinals(), BTreeSet::from([3]));
        assert_eq!(map.devices_on(3), vec![id(0), id(1), id(2), id(3)]);
        assert_eq!(map.ordinal(id(2)), Some(3));
        assert_eq!(map.ordinal(id(4)), None);
    }

    #[test]
    fn round_robin_deals_devices_over_gpus() {
        let map = DeviceMap::round_robin(5, &[0, 1]).unwrap();
        assert_eq!(map.devices_on(0), vec![id(0), id(2), id(4)]);
        assert_eq!(map.devices_on(1), vec![id(1), id(3)]);
    }

    #[test]
    fn one_per_gpu_is_the_identity() {
        let map = DeviceMap::one_per_gpu(3).unwrap();
        assert!(
            map.iter()
                .all(|(device, ordinal)| device.index() as usize == ordinal)
        );
    }

    #[test]
    fn ordinals_beyond_the_machine_are_named() {
        let map = DeviceMap::new([(id(0), 0), (id(7), 2)]).unwrap();
        assert_eq!(map.check_ordinals(3), Ok(()));
        assert_eq!(
            map.check_ordinals(2),
            Err(DeviceMapError::OrdinalOutOfRange {
                device: id(7),
                ordinal: 2,
                available: 2
            })
        );
    }

    #[test]
    fn text_form_round_trips() {
        let map: DeviceMap = " 0:0, 1:0 ,5:1".parse().unwrap();
        assert_eq!(map.to_string(), "0:0,1:0,5:1");
        assert_eq!(map.to_string().parse::<DeviceMap>(), Ok(map));
    }

    #[test]
    fn malformed_text_is_rejected_with_a_reason() {
        for text in ["0", "a:0", "0:-1", "0:0,1"] {
            assert!(
                matches!(text.parse::<DeviceMap>(), Err(DeviceMapError::Parse { .. })),
                "{text}"
            );
        }
        assert_eq!("".parse::<DeviceMap>(), Err(DeviceMapError::Empty));
        assert_eq!(
            "0:0,0:1".parse::<DeviceMap>(),
            Err(DeviceMapError::DuplicateDevice { device: id(0) })
        );
    }
}
