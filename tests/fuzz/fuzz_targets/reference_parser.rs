//! Fuzz the reference driver's parser natively: chunking, exit code and stdout from the input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    adaptor_sdk::harness::fuzz_replay::<reference_driver::ReferenceSession>(data);
});
