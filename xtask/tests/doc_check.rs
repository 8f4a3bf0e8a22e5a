//! The documents and doc comments name only files, Rust items and conformance
//! check ids that exist (`cargo xtask doc-check`, `xtask::doccheck`), so a
//! renamed module or a removed check cannot leave a doc pointing at nothing.

use std::path::PathBuf;

use xtask::doccheck;

#[test]
fn documents_name_only_what_exists() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let files = doccheck::tracked_files(&root).expect("git ls-files");
    let mut ix = doccheck::Index::new(&root, files);
    for list in [
        ferroccl_conformance::report::list(),
        ferroccl_conformance::tuner::SECTION.list(),
        ferroccl_conformance::profiler::SECTION.list(),
        ferroccl_conformance::collnet::SECTION.list(),
        ferroccl_conformance::gin::SECTION.list(),
        ferroccl_conformance::env::SECTION.list(),
        ferroccl_conformance::rma::SECTION.list(),
    ] {
        ix.check_ids.extend(doccheck::ids_of_list(&list));
    }
    assert!(ix.check_ids.contains("load.init"), "{:?}", ix.check_ids);
    assert!(ix.check_ids.contains("vdev.make"), "{:?}", ix.check_ids);
    assert!(ix.files.len() > 100, "{} tracked files", ix.files.len());
    let findings = doccheck::check(&ix);
    let text: Vec<String> = findings.iter().map(ToString::to_string).collect();
    assert!(
        findings.is_empty(),
        "{} name(s) in the documents do not exist:\n{}",
        findings.len(),
        text.join("\n")
    );
}
