//! Smoke run of the host-output fuzz property on stable: mutated scripts for the `puppet`
//! test driver (whose every output is dictated by its input) go through
//! `adaptor::replay::replay_session` — the host's own validation of driver events, actions and
//! outcomes. Whatever the driver returns, the host must not panic, must answer with a result
//! or a typed error (never a trap: the puppet cannot trap), and must keep its stream
//! well-formed. The long run is the `host_outputs` cargo-fuzz target in `tests/fuzz/`.

use adaptor::replay::replay_session;
use adaptor::{Driver, Error, Event, ExitInfo, RunOptions, StreamKind};
use adaptor_integration_tests::*;

/// Valid and invalid puppet scripts: the seeds the mutations start from.
const SEEDS: &[&str] = &[
    concat!(
        r#"["session","s1","m"]"#,
        "\n",
        r#"["text","t1",0,""]"#,
        "\n",
        r#"["text","t1",1,"hello"]"#,
        "\n",
        r#"["text","t1",2,""]"#,
        "\n",
        r#"["tool","c1","echo",0,"{\"a\":1}",null]"#,
        "\n",
        r#"["tool","c1","echo",2,"{\"a\":1}",null]"#,
        "\n",
        r#"["result","c1","ok",false]"#,
        "\n",
        r#"["item",0,"hello",null,null,null]"#,
        "\n",
        r#"["usage",10,5]"#,
        "\n",
        r#"["outcome","hello","result","{\"ok\":true}","s1",true,"{\"v\":1}",null,null]"#,
        "\n",
        r#"["end"]"#,
        "\n",
    ),
    concat!(
        r#"["tool","c2","x",1,"not json",null]"#,
        "\n",
        r#"["item",3,null,"c2","{bad",null]"#,
        "\n",
        r#"["approval","a1",2,"{\"q\":1}"]"#,
        "\n",
        r#"["notice","k","m","{\"d\":[1,2]}"]"#,
        "\n",
        r#"["vendor","v","{]"]"#,
        "\n",
        r#"["write","x"]"#,
        "\n",
        r#"["close"]"#,
        "\n",
        r#"["timer",1,5]"#,
        "\n",
        r#"["outcome","","result","{not json","s2",true,"{x",3,"[1]"]"#,
        "\n",
    ),
    concat!(
        r#"["think","r",2,""]"#,
        "\n",
        r#"["text","",1,"orphan delta"]"#,
        "\n",
        r#"["item",12,"failed",null,null,"{\"code\":1}"]"#,
        "\n",
        r#"["outcome","x",null,"",null,false,null,0,"{\"why\":\"x\"}"]"#,
        "\n",
    ),
];

fn exit(code: u8) -> ExitInfo {
    ExitInfo {
        code: Some(i32::from(code % 3)),
        signal: None,
        ..ExitInfo::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_validates_arbitrary_driver_outputs_without_panicking() {
    let driver = Driver::from_file(test_driver_path("puppet")).expect("puppet.wasm");
    let seeds: Vec<&[u8]> = SEEDS.iter().map(|s| s.as_bytes()).collect();
    let mut outcomes = [0usize; 3];
    for input in adaptor_sdk::harness::fuzz_inputs(&seeds, 400, 0x5eed) {
        let [chunk, code, _, stdout @ ..] = input.as_slice() else {
            continue;
        };
        let chunks: Vec<(StreamKind, Vec<u8>)> = stdout
            .chunks(usize::from(*chunk).max(1))
            .map(|c| (StreamKind::Stdout, c.to_vec()))
            .collect();
        let replay =
            replay_session(&driver, "fuzz", &RunOptions::new(), &chunks, exit(*code)).await;
        match &replay.result {
            Ok(_) => outcomes[0] += 1,
            Err(Error::Run(_)) => outcomes[1] += 1,
            Err(Error::DriverContract { driver, .. }) => {
                assert_eq!(driver, "puppet");
                outcomes[2] += 1
            }
            Err(other) => panic!("untyped or unexpected error for {input:?}: {other:?}"),
        }
        for pair in replay.events.windows(2) {
            assert!(pair[1].meta().sequence > pair[0].meta().sequence);
        }
        if let Some(last) = replay.events.last() {
            assert!(matches!(last, Event::RunFinished(_)), "{last:?}");
        }
    }
    // The mutations reach all three verdicts: accepted, failed runs and refused outputs.
    assert!(outcomes.iter().all(|n| *n > 0), "{outcomes:?}");
}
