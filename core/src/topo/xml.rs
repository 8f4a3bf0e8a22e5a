//! NCCL's topology and graph XML (`src/graph/xml.h`, `xml.cc`): an element tree, a reader
//! built on `quick-xml` that keeps only the elements NCCL's handlers accept, NCCL's writer
//! format, and the tree operations topology detection needs (find, fuse, trim).
//!
//! Accepted nesting (anything else is skipped with its subtree, as NCCL's `xmlLoadSub`
//! does): topology `system → cpu → pci|nic`, `pci → pci|gpu|nic|pcilink`,
//! `gpu → nvlink|c2c`, `nic → net`; graphs `graphs → graph → channel → net|gpu`.
//! `<system version>` and `<graphs version>` must be 1.

use std::fmt::Write as _;
use std::path::Path;

use quick_xml::events::{BytesStart, Event};
use quick_xml::reader::Reader;

use super::TopoError;
use super::types::{GRAPH_XML_MAX_NODES, GRAPH_XML_VERSION, TOPO_XML_MAX_NODES, TOPO_XML_VERSION};

/// Longest attribute name or value NCCL stores (`MAX_STR_LEN` = 255).
pub const MAX_STR_LEN: usize = 255;
/// Most attributes NCCL keeps per element (`MAX_ATTR_COUNT`); extra ones are ignored.
pub const MAX_ATTR_COUNT: usize = 16;
/// Most children per element (`MAX_SUBS`).
pub const MAX_SUBS: usize = 640;

/// One XML element: name, attributes in insertion order, children in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct XmlNode {
    /// Element name.
    pub name: String,
    /// Attributes, in order (NCCL writes them in insertion order).
    pub attrs: Vec<(String, String)>,
    /// Child elements.
    pub subs: Vec<XmlNode>,
}

impl XmlNode {
    /// An element with no attributes or children.
    pub fn new(name: &str) -> XmlNode {
        XmlNode {
            name: name.to_string(),
            ..XmlNode::default()
        }
    }

    /// Builder: adds (or replaces) an attribute.
    pub fn with(mut self, key: &str, value: impl ToString) -> XmlNode {
        self.set_attr(key, value);
        self
    }

    /// The value of `key`, if present (`xmlGetAttr`).
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Whether `key` is present.
    pub fn has_attr(&self, key: &str) -> bool {
        self.attr(key).is_some()
    }

    /// Sets `key` (replacing its value in place, else appending: `xmlSetAttr`).
    pub fn set_attr(&mut self, key: &str, value: impl ToString) {
        let v = value.to_string();
        match self.attrs.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = v,
            None => self.attrs.push((key.to_string(), v)),
        }
    }

    /// Sets `key` only when it is absent (`xmlInitAttr*`, `xmlSetAttrIfUnset`).
    pub fn init_attr(&mut self, key: &str, value: impl ToString) {
        if !self.has_attr(key) {
            self.attrs.push((key.to_string(), value.to_string()));
        }
    }

    /// Removes `key` (`xmlUnsetAttr`).
    pub fn unset_attr(&mut self, key: &str) {
        self.attrs.retain(|(k, _)| k != key);
    }

    /// The value of a required attribute (`xmlGetAttrStr`): missing → an error naming the
    /// element and the attribute.
    pub fn req(&self, key: &str) -> Result<&str, TopoError> {
        self.attr(key).ok_or_else(|| TopoError::MissingAttribute {
            element: self.name.clone(),
            attribute: key.to_string(),
        })
    }

    /// A required integer attribute (`xmlGetAttrInt`, `strtol(…, 0)`).
    pub fn req_int(&self, key: &str) -> Result<i64, TopoError> {
        let v = self.req(key)?;
        super::types::parse_c_int(v).ok_or_else(|| self.bad(key, v, "an integer"))
    }

    /// An optional integer attribute with a default (`xmlGetAttrIntDefault`).
    pub fn int_or(&self, key: &str, default: i64) -> Result<i64, TopoError> {
        match self.attr(key) {
            None => Ok(default),
            Some(v) => super::types::parse_c_int(v).ok_or_else(|| self.bad(key, v, "an integer")),
        }
    }

    /// A required float attribute (`xmlGetAttrFloat`).
    pub fn req_float(&self, key: &str) -> Result<f32, TopoError> {
        let v = self.req(key)?;
        super::types::parse_c_float(v).ok_or_else(|| self.bad(key, v, "a number"))
    }

    /// An optional float attribute with a default.
    pub fn float_or(&self, key: &str, default: f32) -> Result<f32, TopoError> {
        match self.attr(key) {
            None => Ok(default),
            Some(v) => super::types::parse_c_float(v).ok_or_else(|| self.bad(key, v, "a number")),
        }
    }

    /// The error for a malformed attribute value.
    pub fn bad(&self, key: &str, value: &str, expected: &str) -> TopoError {
        TopoError::BadAttribute {
            element: self.name.clone(),
            attribute: key.to_string(),
            value: value.to_string(),
            expected: expected.to_string(),
        }
    }

    /// First child named `name` (`xmlGetSub`).
    pub fn sub(&self, name: &str) -> Option<&XmlNode> {
        self.subs.iter().find(|s| s.name == name)
    }

    /// First child named `name`, mutable.
    pub fn sub_mut(&mut self, name: &str) -> Option<&mut XmlNode> {
        self.subs.iter_mut().find(|s| s.name == name)
    }

    /// First child named `name` whose `key` equals `value` (`xmlGetSubKv`).
    pub fn sub_kv_mut(&mut self, name: &str, key: &str, value: &str) -> Option<&mut XmlNode> {
        self.subs
            .iter_mut()
            .find(|s| s.name == name && s.attr(key) == Some(value))
    }

    /// Depth-first (pre-order) search of the whole subtree, self included, for an element
    /// named `name` with `key == value` (`xmlFindTagKv`).
    pub fn find_kv(&self, name: &str, key: &str, value: &str) -> Option<&XmlNode> {
        if self.name == name && self.attr(key) == Some(value) {
            return Some(self);
        }
        self.subs.iter().find_map(|s| s.find_kv(name, key, value))
    }

    /// Mutable [`find_kv`](Self::find_kv).
    pub fn find_kv_mut(&mut self, name: &str, key: &str, value: &str) -> Option<&mut XmlNode> {
        if self.name == name && self.attr(key) == Some(value) {
            return Some(self);
        }
        self.subs.iter_mut().find_map(|s| s.find_kv_mut(name, key, value))
    }

    /// First element named `name` in pre-order (`xmlFindTag`).
    pub fn find(&self, name: &str) -> Option<&XmlNode> {
        if self.name == name {
            return Some(self);
        }
        self.subs.iter().find_map(|s| s.find(name))
    }

    /// Mutable [`find`](Self::find).
    pub fn find_mut(&mut self, name: &str) -> Option<&mut XmlNode> {
        if self.name == name {
            return Some(self);
        }
        self.subs.iter_mut().find_map(|s| s.find_mut(name))
    }

    /// Visits every element named `name` in pre-order, mutably.
    pub fn for_each_mut(&mut self, name: &str, f: &mut dyn FnMut(&mut XmlNode)) {
        if self.name == name {
            f(self);
        }
        for s in &mut self.subs {
            s.for_each_mut(name, f);
        }
    }

    /// Number of elements in the subtree, self included.
    pub fn count(&self) -> usize {
        1 + self.subs.iter().map(XmlNode::count).sum::<usize>()
    }

    /// The path of child indices to the first pre-order element matching `pred`.
    pub fn path_to(&self, pred: &dyn Fn(&XmlNode) -> bool) -> Option<Vec<usize>> {
        if pred(self) {
            return Some(Vec::new());
        }
        for (i, s) in self.subs.iter().enumerate() {
            if let Some(mut p) = s.path_to(pred) {
                p.insert(0, i);
                return Some(p);
            }
        }
        None
    }

    /// The element at a path of child indices.
    pub fn at_path_mut(&mut self, path: &[usize]) -> &mut XmlNode {
        let mut n = self;
        for &i in path {
            n = &mut n.subs[i];
        }
        n
    }

    /// The element at a path of child indices.
    pub fn at_path(&self, path: &[usize]) -> &XmlNode {
        let mut n = self;
        for &i in path {
            n = &n.subs[i];
        }
        n
    }

    /// `xmlFindNode`: the child of `self` that matches `other` (same name, same number of
    /// attributes, every attribute of `other` present with the same value).
    fn matching_child(&mut self, other: &XmlNode) -> Option<&mut XmlNode> {
        self.subs.iter_mut().find(|d| {
            d.name == other.name
                && d.attrs.len() == other.attrs.len()
                && other.attrs.iter().all(|(k, v)| d.attr(k) == Some(v.as_str()))
        })
    }
}

/// Which schema a document follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schema {
    /// Topology (`NCCL_TOPO_FILE`, root `<system>`).
    Topology,
    /// Graphs (`NCCL_GRAPH_FILE`, root `<graphs>`).
    Graphs,
}

impl Schema {
    fn root(self) -> &'static str {
        match self {
            Schema::Topology => "system",
            Schema::Graphs => "graphs",
        }
    }

    /// Children NCCL's handler for `parent` accepts (`None` = document level).
    fn accepts(self, parent: Option<&str>, child: &str) -> bool {
        let allowed: &[&str] = match (self, parent) {
            (_, None) => &[self.root()],
            (Schema::Topology, Some("system")) => &["cpu"],
            (Schema::Topology, Some("cpu")) => &["pci", "nic"],
            (Schema::Topology, Some("pci")) => &["pci", "gpu", "nic", "pcilink"],
            (Schema::Topology, Some("gpu")) => &["nvlink", "c2c"],
            (Schema::Topology, Some("nic")) => &["net"],
            (Schema::Graphs, Some("graphs")) => &["graph"],
            (Schema::Graphs, Some("graph")) => &["channel"],
            (Schema::Graphs, Some("channel")) => &["net", "gpu"],
            _ => &[],
        };
        allowed.contains(&child)
    }

    fn max_nodes(self) -> usize {
        match self {
            Schema::Topology => TOPO_XML_MAX_NODES,
            Schema::Graphs => GRAPH_XML_MAX_NODES,
        }
    }
}

/// Options for [`parse_with`].
#[derive(Debug, Clone, Copy)]
pub struct ParseOptions {
    /// Most kept elements (NCCL: 256 for a topology file, 65536 for graphs). Fused
    /// topologies of several ranks need more.
    pub max_nodes: usize,
}

/// Parses a topology or graph document with NCCL's limits. `origin` names the input in
/// errors (a path or `NCCL_TOPO_FILE`).
pub fn parse(text: &str, schema: Schema, origin: &str) -> Result<XmlNode, TopoError> {
    parse_with(
        text,
        schema,
        origin,
        ParseOptions {
            max_nodes: schema.max_nodes(),
        },
    )
}

/// [`parse`] with explicit limits. Returns the root element (`<system>` or `<graphs>`),
/// after checking its `version`.
pub fn parse_with(text: &str, schema: Schema, origin: &str, opts: ParseOptions) -> Result<XmlNode, TopoError> {
    let mut reader = Reader::from_str(text);
    reader.config_mut().trim_text(true);
    // Stack of open elements; `None` entries are skipped subtrees.
    let mut stack: Vec<Option<XmlNode>> = Vec::new();
    let mut root: Option<XmlNode> = None;
    let mut kept = 0usize;
    let syntax = |reader: &Reader<&[u8]>, message: String| TopoError::XmlSyntax {
        origin: origin.to_string(),
        position: reader.buffer_position(),
        message,
    };
    loop {
        let ev = reader.read_event().map_err(|e| syntax(&reader, e.to_string()))?;
        match ev {
            Event::Start(ref e) | Event::Empty(ref e) => {
                let empty = matches!(ev, Event::Empty(_));
                let name = std::str::from_utf8(e.name().as_ref())
                    .map_err(|_| syntax(&reader, "element name is not UTF-8".to_string()))?
                    .to_string();
                if name.len() > MAX_STR_LEN {
                    return Err(syntax(
                        &reader,
                        format!("element name longer than {MAX_STR_LEN} characters"),
                    ));
                }
                // Keep it when its parent is kept and accepts it.
                let parent_name = match stack.last() {
                    None => Some(None),
                    Some(Some(p)) => Some(Some(p.name.clone())),
                    Some(None) => None,
                };
                let keep = match &parent_name {
                    Some(p) => schema.accepts(p.as_deref(), &name) && !(p.is_none() && root.is_some()),
                    None => false,
                };
                let node = if keep {
                    kept += 1;
                    if kept > opts.max_nodes {
                        return Err(TopoError::TooLarge {
                            what: origin.to_string(),
                            limit: opts.max_nodes,
                            item: "elements".to_string(),
                        });
                    }
                    Some(element(&reader, e, &name, origin)?)
                } else {
                    None
                };
                if empty {
                    close(&mut stack, &mut root, node, origin)?;
                } else {
                    stack.push(node);
                }
            }
            Event::End(_) => {
                let node = stack
                    .pop()
                    .ok_or_else(|| syntax(&reader, "closing tag without an opening tag".to_string()))?;
                close(&mut stack, &mut root, node, origin)?;
            }
            Event::Text(t) => {
                let s = String::from_utf8_lossy(t.as_ref());
                if !s.trim().is_empty() {
                    return Err(syntax(
                        &reader,
                        format!("unexpected text {:?}: expecting '<'", s.trim()),
                    ));
                }
            }
            Event::GeneralRef(_) | Event::CData(_) => {
                return Err(syntax(&reader, "unexpected character data: expecting '<'".to_string()));
            }
            Event::Comment(_) | Event::Decl(_) | Event::PI(_) | Event::DocType(_) => {}
            Event::Eof => break,
        }
    }
    if let Some(open) = stack.last() {
        let name = open.as_ref().map(|n| n.name.clone()).unwrap_or_default();
        return Err(TopoError::XmlSyntax {
            origin: origin.to_string(),
            position: reader.buffer_position(),
            message: format!("unterminated <{name}>"),
        });
    }
    let root = root.ok_or_else(|| TopoError::MissingElement {
        what: origin.to_string(),
        element: schema.root().to_string(),
    })?;
    let expected = match schema {
        Schema::Topology => TOPO_XML_VERSION,
        Schema::Graphs => GRAPH_XML_VERSION,
    };
    let found = root.req_int("version")?;
    if found != expected {
        return Err(TopoError::Version {
            element: root.name.clone(),
            found: root.attr("version").unwrap_or_default().to_string(),
            expected,
        });
    }
    Ok(root)
}

fn element(reader: &Reader<&[u8]>, e: &BytesStart<'_>, name: &str, origin: &str) -> Result<XmlNode, TopoError> {
    let mut node = XmlNode::new(name);
    for a in e.attributes() {
        let a = a.map_err(|err| TopoError::XmlSyntax {
            origin: origin.to_string(),
            position: reader.buffer_position(),
            message: format!("<{name}>: {err}"),
        })?;
        let key = String::from_utf8_lossy(a.key.as_ref()).into_owned();
        let value = a
            .unescape_value()
            .map_err(|err| TopoError::XmlSyntax {
                origin: origin.to_string(),
                position: reader.buffer_position(),
                message: format!("<{name} {key}>: {err}"),
            })?
            .into_owned();
        if key.len() > MAX_STR_LEN || value.len() > MAX_STR_LEN {
            return Err(TopoError::BadAttribute {
                element: name.to_string(),
                attribute: key.chars().take(64).collect(),
                value: value.chars().take(64).collect(),
                expected: format!("at most {MAX_STR_LEN} characters"),
            });
        }
        if node.attrs.len() == MAX_ATTR_COUNT {
            // NCCL: "XML Parse : Ignoring extra attributes (max 16)".
            continue;
        }
        node.attrs.push((key, value));
    }
    Ok(node)
}

fn close(
    stack: &mut [Option<XmlNode>],
    root: &mut Option<XmlNode>,
    node: Option<XmlNode>,
    origin: &str,
) -> Result<(), TopoError> {
    let Some(node) = node else { return Ok(()) };
    match stack.last_mut() {
        Some(Some(parent)) => {
            if parent.subs.len() == MAX_SUBS {
                return Err(TopoError::TooLarge {
                    what: format!("{origin}: <{}>", parent.name),
                    limit: MAX_SUBS,
                    item: "children".to_string(),
                });
            }
            parent.subs.push(node);
        }
        Some(None) => {}
        None => *root = Some(node),
    }
    Ok(())
}

/// Reads and parses a file.
pub fn load_file(path: &Path, schema: Schema) -> Result<XmlNode, TopoError> {
    let text = std::fs::read_to_string(path).map_err(|source| TopoError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text, schema, &path.display().to_string())
}

fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            _ => o.push(c),
        }
    }
    o
}

fn dump_rec(out: &mut String, indent: usize, node: &XmlNode) {
    let _ = write!(out, "{:indent$}<{}", "", node.name);
    for (k, v) in &node.attrs {
        let _ = write!(out, " {}=\"{}\"", k, escape(v));
    }
    if node.subs.is_empty() {
        out.push_str("/>\n");
    } else {
        out.push_str(">\n");
        for s in &node.subs {
            dump_rec(out, indent + 2, s);
        }
        let _ = writeln!(out, "{:indent$}</{}>", "", node.name);
    }
}

/// Writes a tree as NCCL's `ncclTopoDumpXmlRec` does: two spaces per level, attributes in
/// order as `key="value"`, `/>` for childless elements.
pub fn dump(node: &XmlNode) -> String {
    let mut out = String::new();
    dump_rec(&mut out, 0, node);
    out
}

/// `ncclTopoFuseXml`: merges `src` (a `<system>` tree) into `dst`. A child of `src` that
/// matches a child of the corresponding `dst` element (same name, same attribute count and
/// values) is merged recursively; others are appended with their subtree. `dst == None`
/// takes `src` whole.
pub fn fuse(dst: &mut Option<XmlNode>, src: &XmlNode) {
    match dst {
        None => *dst = Some(src.clone()),
        Some(d) => fuse_rec(d, src),
    }
}

fn fuse_rec(dst: &mut XmlNode, src: &XmlNode) {
    for s in &src.subs {
        match dst.matching_child(s) {
            Some(d) => fuse_rec(d, s),
            None => dst.subs.push(s.clone()),
        }
    }
}

/// `ncclTopoTrimXml`: removes every `pci`/`cpu`/`nic`/`net` subtree with no element carrying
/// `keep="1"`, and strips the `keep` attributes. Returns whether anything is kept.
pub fn trim(node: &mut XmlNode) -> bool {
    if node.attr("keep") == Some("1") {
        node.unset_attr("keep");
        return true;
    }
    let mut any = false;
    let subs = std::mem::take(&mut node.subs);
    for mut s in subs {
        let k = trim(&mut s);
        let removable = matches!(s.name.as_str(), "pci" | "cpu" | "nic" | "net");
        if k || !removable {
            node.subs.push(s);
        }
        any |= k;
    }
    any
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_dumps_in_nccl_format() {
        let text = r#"<!-- c --><system version="1">
  <cpu numaid="0" arch="x86_64">
    <pci busid="0000:01:00.0" class="0x030200"><gpu dev="0"><nvlink target="x" count="2"/></gpu><bogus a="1"><pci busid="z"/></bogus></pci>
    <nic><net name="eth0" dev="0"/></nic>
  </cpu>
  <other/>
</system>"#;
        let root = parse(text, Schema::Topology, "t").unwrap();
        let out = dump(&root);
        assert_eq!(
            out,
            "<system version=\"1\">\n  <cpu numaid=\"0\" arch=\"x86_64\">\n    <pci busid=\"0000:01:00.0\" class=\"0x030200\">\n      <gpu dev=\"0\">\n        <nvlink target=\"x\" count=\"2\"/>\n      </gpu>\n    </pci>\n    <nic>\n      <net name=\"eth0\" dev=\"0\"/>\n    </nic>\n  </cpu>\n</system>\n"
        );
        assert_eq!(parse(&out, Schema::Topology, "t").unwrap(), root);
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let e = parse("<system><cpu/></system>", Schema::Topology, "t").unwrap_err();
        assert!(
            e.to_string().contains("<system> is missing attribute \"version\""),
            "{e}"
        );
        let e = parse("<system version=\"2\"/>", Schema::Topology, "t").unwrap_err();
        assert!(matches!(e, TopoError::Version { .. }), "{e}");
        let e = parse("<system version=\"1\"><cpu>", Schema::Topology, "t").unwrap_err();
        assert!(e.to_string().contains("unterminated <cpu>"), "{e}");
        let e = parse("<system version=\"1\"></cpu>", Schema::Topology, "t").unwrap_err();
        assert!(matches!(e, TopoError::XmlSyntax { .. }), "{e}");
        let e = parse("<system version=\"1\">hello</system>", Schema::Topology, "t").unwrap_err();
        assert!(e.to_string().contains("expecting '<'"), "{e}");
        let e = parse("", Schema::Topology, "t").unwrap_err();
        assert!(e.to_string().contains("no <system> element"), "{e}");
        let e = parse("<system version=\"x1\"/>", Schema::Topology, "t").unwrap_err();
        assert!(e.to_string().contains("version"), "{e}");
    }

    #[test]
    fn fuse_merges_identical_and_appends_new() {
        let a = parse(
            r#"<system version="1"><cpu numaid="0"><pci busid="1"><gpu rank="0"/></pci></cpu></system>"#,
            Schema::Topology,
            "a",
        )
        .unwrap();
        let b = parse(
            r#"<system version="1"><cpu numaid="0"><pci busid="1"><gpu rank="1"/></pci><pci busid="2"/></cpu><cpu numaid="1"/></system>"#,
            Schema::Topology,
            "b",
        )
        .unwrap();
        let mut f = None;
        fuse(&mut f, &a);
        fuse(&mut f, &b);
        let f = f.unwrap();
        assert_eq!(f.subs.len(), 2);
        assert_eq!(f.subs[0].subs.len(), 2);
        assert_eq!(f.subs[0].subs[0].subs.len(), 2);
    }

    #[test]
    fn trim_keeps_marked_subtrees_only() {
        let mut t = parse(
            r#"<system version="1"><cpu numaid="0"><pci busid="1"><gpu keep="1"/></pci><pci busid="2"/></cpu><cpu numaid="1"><nic><net name="a"/></nic></cpu></system>"#,
            Schema::Topology,
            "t",
        )
        .unwrap();
        trim(&mut t);
        assert_eq!(
            dump(&t),
            "<system version=\"1\">\n  <cpu numaid=\"0\">\n    <pci busid=\"1\">\n      <gpu/>\n    </pci>\n  </cpu>\n</system>\n"
        );
    }
}
