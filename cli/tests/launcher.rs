//! The `adaptor` launcher links the small library alone: the runtime, the async runtime and
//! the argument parser stay in `adaptor-host`, or every served run would pay for starting
//! them again (`src/lib.rs` says why the two are apart).

#[test]
fn the_launcher_links_none_of_the_runtime() {
    let launcher = env!("CARGO_BIN_EXE_adaptor");
    let symbols = |exe: &str| -> String {
        let nm = std::process::Command::new("nm")
            .args(["--defined-only", exe])
            .output()
            .expect("nm (binutils)");
        assert!(nm.status.success(), "nm {exe}");
        String::from_utf8_lossy(&nm.stdout).into_owned()
    };
    let ours = symbols(launcher);
    assert!(
        ours.contains("adaptor_cli8handover9hand_over"),
        "the launcher has no hand-over"
    );
    for crate_name in ["8wasmtime", "5tokio", "12clap_builder", "10serde_json"] {
        assert!(
            !ours.contains(crate_name),
            "{launcher} links `{crate_name}`"
        );
    }
    // The same check sees them in the command itself.
    let host = symbols(env!("CARGO_BIN_EXE_adaptor-host"));
    assert!(host.contains("8wasmtime") && host.contains("5tokio"));
}
