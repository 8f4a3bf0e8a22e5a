//! Graph XML (NCCL 2.30.7 `search.cc`: `ncclTopoGetGraphFromXml`, `ncclTopoGetChannelFromXml`,
//! `ncclTopoGetXmlFromGraphs`; `xml.cc`: the `graphs → graph → channel → net|gpu` reader).
//!
//! NCCL 2.30.7 reads and writes the per-channel bandwidths as `speedintra` / `speedinter`;
//! files that name them `bwintra` / `bwinter` are accepted too (the `speed*` names win when
//! both are present).

use super::topo_graph::{PATTERN_NVLS, TopoGraph};
use crate::topo::system::System;
use crate::topo::types::*;
use crate::topo::xml::XmlNode;
use crate::topo::{NodeType, TopoError, TopoParams};

/// `kvDictLinkType`: the type names a graph file may use (no C2C, NET or DIS).
const LINK_TYPES: [(&str, PathType); 9] = [
    ("LOC", PathType::Loc),
    ("NVL", PathType::Nvl),
    ("NVB", PathType::Nvb),
    ("PIX", PathType::Pix),
    ("PXB", PathType::Pxb),
    ("P2C", PathType::P2c),
    ("PXN", PathType::Pxn),
    ("PHB", PathType::Phb),
    ("SYS", PathType::Sys),
];

fn type_from_str(s: &str) -> PathType {
    // kvConvertToInt: prefix match, unknown → 0 (LOC).
    kv_prefix(s, &LINK_TYPES, PathType::Loc)
}

fn type_to_str(t: PathType) -> Result<&'static str, TopoError> {
    LINK_TYPES
        .iter()
        .find(|(_, v)| *v == t)
        .map(|(k, _)| *k)
        .ok_or_else(|| {
            TopoError::Graph(format!(
                "KV Convert to str : could not find value {} in dictionary",
                t as u8
            ))
        })
}

fn bw_attr(x: &XmlNode, speed: &str, bw: &str) -> Result<f32, TopoError> {
    if x.has_attr(speed) || !x.has_attr(bw) {
        x.req_float(speed)
    } else {
        x.req_float(bw)
    }
}

/// `ncclTopoGetGraphFromXml`: fills `graph` from the `<graph id=graph.id>` elements of a
/// parsed `<graphs>` document. Returns the number of `<channel>` elements read (0 when the
/// file has no graph with this id). `graph.n_channels` comes from the `nchannels` attribute.
pub fn load_graph(xml: &XmlNode, sys: &System, graph: &mut TopoGraph, params: &TopoParams) -> Result<usize, TopoError> {
    let mut n = 0;
    for x in xml.subs.iter().filter(|s| s.name == "graph") {
        if x.req_int("id")? != i64::from(graph.id) {
            continue;
        }
        let cross = x.req_int("crossnic")?;
        if params.cross_nic == 0 && cross == 1 {
            continue;
        }
        graph.cross_nic = cross as i32;
        graph.pattern = x.req_int("pattern")? as i32;
        let nch = x.req_int("nchannels")?;
        if !(0..=MAXCHANNELS as i64).contains(&nch) {
            return Err(x.bad("nchannels", &nch.to_string(), &format!("0..{MAXCHANNELS}")));
        }
        graph.n_channels = nch as usize;
        graph.bw_intra = bw_attr(x, "speedintra", "bwintra")?;
        graph.bw_inter = bw_attr(x, "speedinter", "bwinter")?;
        graph.latency_inter = x.float_or("latencyinter", 0.0)?;
        graph.type_intra = type_from_str(x.req("typeintra")?);
        graph.type_inter = type_from_str(x.req("typeinter")?);
        graph.same_channels = x.req_int("samechannels")? != 0;
        let channels: Vec<&XmlNode> = x.subs.iter().filter(|s| s.name == "channel").collect();
        if channels.len() > MAXCHANNELS {
            return Err(TopoError::TooLarge {
                what: format!("<graph id=\"{}\">", graph.id),
                limit: MAXCHANNELS,
                item: "channels".into(),
            });
        }
        for (c, ch) in channels.iter().enumerate() {
            load_channel(ch, c, sys, graph)?;
        }
        n = channels.len();
    }
    Ok(n)
}

fn load_channel(ch: &XmlNode, c: usize, sys: &System, graph: &mut TopoGraph) -> Result<(), TopoError> {
    let ngpus = graph.ngpus;
    let (mut nn, mut ng) = (0usize, 0usize);
    for sub in &ch.subs {
        let s = sub.req("dev")?;
        let h = s.trim_start_matches("0x").trim_start_matches("0X");
        let dev = i64::from_str_radix(if h.is_empty() { "0" } else { h }, 16)
            .map_err(|_| sub.bad("dev", s, "a hexadecimal id"))?;
        if sub.name == "net" {
            if nn >= 2 {
                return Err(TopoError::Graph(format!("channel {c}: more than two <net> elements")));
            }
            graph.inter[2 * c + nn] = dev;
            nn += 1;
        } else if sub.name == "gpu" {
            if ng >= ngpus {
                return Err(TopoError::Graph(format!(
                    "channel {c}: more <gpu> elements than the system's {ngpus} GPUs"
                )));
            }
            let rank = match sub.attr("rank") {
                Some(r) => parse_c_int(r).ok_or_else(|| sub.bad("rank", r, "an integer"))? as i32,
                None => {
                    let mut found = -1;
                    for g in sys.of(NodeType::Gpu) {
                        let (gdev, rank, ..) = g.gpu();
                        let sid = topo_id_system(g.id) as usize;
                        if topo_id(sid, i64::from(gdev)) == dev {
                            found = rank;
                        }
                    }
                    if found == -1 {
                        return Err(TopoError::Graph(format!("XML Import Channel : dev {dev} not found.")));
                    }
                    found
                }
            };
            graph.intra[ngpus * c + ng] = rank;
            ng += 1;
        }
    }
    Ok(())
}

/// C's `%g`.
pub fn fmt_g(v: f64) -> String {
    if v == 0.0 {
        return "0".to_string();
    }
    if !v.is_finite() {
        return format!("{v}");
    }
    let exp = v.abs().log10().floor() as i32;
    let strip = |s: String| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if !(-4..6).contains(&exp) {
        let s = format!("{:.5e}", v);
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let e: i32 = e.parse().unwrap_or(0);
        format!(
            "{}e{}{:02}",
            strip(m.to_string()),
            if e < 0 { '-' } else { '+' },
            e.abs()
        )
    } else {
        let decimals = (5 - exp).max(0) as usize;
        strip(format!("{:.*}", decimals, v))
    }
}

/// `%#lx`.
fn hex_long(v: i64) -> String {
    if v == 0 {
        "0".to_string()
    } else {
        format!("{:#x}", v as u64)
    }
}

/// `ncclTopoGetXmlFromGraphs`: the `<graphs>` document for `graphs` (NCCL dumps ring, tree,
/// collnet direct, collnet chain, NVLS in that order). Fails on a type NCCL cannot name
/// (C2C, NET, DIS), as NCCL does.
pub fn graphs_to_xml(sys: &System, graphs: &[&TopoGraph]) -> Result<XmlNode, TopoError> {
    let mut root = XmlNode::new("graphs").with("version", GRAPH_XML_VERSION);
    for g in graphs {
        let mut x = XmlNode::new("graph")
            .with("id", g.id)
            .with("pattern", g.pattern)
            .with("crossnic", g.cross_nic)
            .with("nchannels", g.n_channels)
            .with("speedintra", fmt_g(f64::from(g.bw_intra)))
            .with("speedinter", fmt_g(f64::from(g.bw_inter)))
            .with("latencyinter", fmt_g(f64::from(g.latency_inter)))
            .with("typeintra", type_to_str(g.type_intra)?)
            .with("typeinter", type_to_str(g.type_inter)?)
            .with("samechannels", u8::from(g.same_channels));
        let ngpus = g.ngpus;
        for c in 0..g.n_channels {
            let mut ch = XmlNode::new("channel");
            if sys.inter {
                ch.subs.push(XmlNode::new("net").with("dev", hex_long(g.inter[2 * c])));
            }
            for i in 0..ngpus {
                let rank = g.intra[ngpus * c + i];
                let gi = sys
                    .rank_to_index(rank)
                    .ok_or_else(|| TopoError::Graph(format!("XML Export Channel : rank {rank} not found.")))?;
                let node = &sys.of(NodeType::Gpu)[gi];
                let dev = topo_id(topo_id_system(node.id) as usize, i64::from(node.gpu().0));
                ch.subs
                    .push(XmlNode::new("gpu").with("dev", hex_long(dev)).with("rank", rank));
                if g.id == 3 || g.pattern == PATTERN_NVLS {
                    break;
                }
            }
            if sys.inter {
                ch.subs
                    .push(XmlNode::new("net").with("dev", hex_long(g.inter[2 * c + 1])));
            }
            x.subs.push(ch);
        }
        root.subs.push(x);
    }
    Ok(root)
}

#[cfg(test)]
mod tests {
    use super::fmt_g;

    #[test]
    fn percent_g() {
        assert_eq!(fmt_g(12.0), "12");
        assert_eq!(fmt_g(0.1), "0.1");
        assert_eq!(fmt_g(17.5), "17.5");
        assert_eq!(fmt_g(0.24), "0.24");
        assert_eq!(fmt_g(f64::from(0.1f32)), "0.1");
        assert_eq!(fmt_g(1234567.0), "1.23457e+06");
        assert_eq!(fmt_g(0.0), "0");
        assert_eq!(fmt_g(370.8), "370.8");
    }
}
