//! The per-rank topology record exchanged in the init all-gather (the topology part of
//! NCCL's `ncclPeerInfo` plus the XML NCCL exchanges in `bootstrapIntraNodeAllGather`).
//!
//! A record carries the rank's view of its host as NCCL builds it before trimming and
//! fusing: the topology XML with the rank's own device and every net device marked
//! `keep="1"`. [`crate::graph::plan()`] fuses the records of each host (ranks sharing
//! `host_hash`) exactly as NCCL fuses the ranks' XML, so every rank sees the whole node.
//!
//! Encoding: `b"FTOPO1\n"` then a JSON object (`serde_json`); decoding checks the magic,
//! the version, the fields (unknown fields rejected) and size limits, and never panics.

use serde::{Deserialize, Serialize};

use super::TopoError;
use super::xml::{self, Schema};

/// Record format version.
pub const RECORD_VERSION: u32 = 1;
/// Magic prefix of [`TopoRecord::to_bytes`].
pub const RECORD_MAGIC: &[u8] = b"FTOPO1\n";
/// Largest encoded record accepted, bytes.
pub const MAX_RECORD_BYTES: usize = 4 << 20;

/// One rank's topology facts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopoRecord {
    /// [`RECORD_VERSION`].
    pub version: u32,
    /// Global rank.
    pub rank: u32,
    /// Host hash (`getHostHash`: hostname + boot id, or `NCCL_HOSTID`).
    pub host_hash: u64,
    /// The rank's topology XML (`<system>`), its device and net devices marked `keep`.
    pub xml: String,
    /// PCI bus id of the rank's GPU; `None` for a CPU rank (its process device is
    /// `topo::fill::process_bus_id(rank)`).
    pub gpu_bus_id: Option<String>,
    /// NUMA node of the rank's CPU affinity (-1 unknown).
    pub numa_node: i32,
    /// The process's CPU affinity (sysfs cpumap format, e.g. `00000000,0000ffff`).
    pub affinity: String,
}

impl TopoRecord {
    /// A record with the current version.
    pub fn new(
        rank: u32,
        host_hash: u64,
        xml: String,
        gpu_bus_id: Option<String>,
        numa_node: i32,
        affinity: String,
    ) -> TopoRecord {
        TopoRecord {
            version: RECORD_VERSION,
            rank,
            host_hash,
            xml,
            gpu_bus_id,
            numa_node,
            affinity,
        }
    }

    /// Encodes the record.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = RECORD_MAGIC.to_vec();
        // Serialising plain strings and integers cannot fail.
        out.extend(serde_json::to_vec(self).unwrap_or_default());
        out
    }

    /// Decodes and validates a record: magic, version, JSON shape, sizes, and that the XML
    /// is a topology document. Bad bytes give an error, never a panic.
    pub fn from_bytes(bytes: &[u8]) -> Result<TopoRecord, TopoError> {
        if bytes.len() > MAX_RECORD_BYTES {
            return Err(TopoError::Record(format!(
                "{} bytes, more than the {MAX_RECORD_BYTES} accepted",
                bytes.len()
            )));
        }
        let body = bytes.strip_prefix(RECORD_MAGIC).ok_or_else(|| {
            TopoError::Record(format!(
                "expected the magic {:?}, found {:?}",
                String::from_utf8_lossy(RECORD_MAGIC),
                String::from_utf8_lossy(&bytes[..bytes.len().min(RECORD_MAGIC.len())])
            ))
        })?;
        let rec: TopoRecord =
            serde_json::from_slice(body).map_err(|e| TopoError::Record(format!("malformed record: {e}")))?;
        if rec.version != RECORD_VERSION {
            return Err(TopoError::Record(format!(
                "version {} (this build reads version {RECORD_VERSION})",
                rec.version
            )));
        }
        if let Some(b) = &rec.gpu_bus_id
            && super::types::bus_id_to_i64(b).is_none()
        {
            return Err(TopoError::Record(format!("gpu_bus_id {b:?} is not a PCI bus id")));
        }
        if rec.numa_node < -1 {
            return Err(TopoError::Record(format!(
                "numa_node {} (expected -1 or a node id)",
                rec.numa_node
            )));
        }
        xml::parse_with(
            &rec.xml,
            Schema::Topology,
            &format!("rank {} topology", rec.rank),
            xml::ParseOptions {
                max_nodes: super::types::TOPO_XML_MAX_NODES * 4,
            },
        )?;
        Ok(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec() -> TopoRecord {
        TopoRecord::new(
            3,
            0xdead_beef,
            "<system version=\"1\"/>\n".into(),
            Some("0000:07:00.0".into()),
            0,
            "0000000f".into(),
        )
    }

    #[test]
    fn round_trip() {
        let r = rec();
        assert_eq!(TopoRecord::from_bytes(&r.to_bytes()).unwrap(), r);
    }

    #[test]
    fn bad_bytes_are_errors() {
        let good = rec().to_bytes();
        assert!(TopoRecord::from_bytes(b"").is_err());
        assert!(TopoRecord::from_bytes(b"FTOPO1\n{").is_err());
        assert!(TopoRecord::from_bytes(&good[..good.len() - 3]).is_err());
        let mut v = rec();
        v.version = 9;
        assert!(
            TopoRecord::from_bytes(&v.to_bytes())
                .unwrap_err()
                .to_string()
                .contains("version 9")
        );
        let mut v = rec();
        v.xml = "<system version=\"2\"/>".into();
        assert!(TopoRecord::from_bytes(&v.to_bytes()).is_err());
        let mut v = rec();
        v.gpu_bus_id = Some("zz".into());
        assert!(TopoRecord::from_bytes(&v.to_bytes()).is_err());
        let extra = String::from_utf8(good.clone()).unwrap().replacen('{', "{\"x\":1,", 1);
        assert!(TopoRecord::from_bytes(extra.as_bytes()).is_err());
        // Every truncation and every single-byte corruption is an error or a valid record,
        // never a panic.
        for i in 0..good.len() {
            let _ = TopoRecord::from_bytes(&good[..i]);
            let mut c = good.clone();
            c[i] ^= 0x5a;
            let _ = TopoRecord::from_bytes(&c);
        }
    }
}
