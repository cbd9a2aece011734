//! The API server judges `nimbus validate` and `nimbus translate` (the CLI binary, as a user
//! runs it) on random cases: for each, the server's verdict on the case comes from server-side
//! dry runs on a control plane set up as in production (the Nimbus CRDs, the shipped admission
//! policies, the engines' CRDs) of the case's SecurityIntent and binding and of the objects the
//! generator names for the pieces the CRDs keep as plain text (`cases::Case::probes`). Then:
//!
//! - `validate` accepts the case exactly when the server accepts all of it (both directions);
//! - for an accepted case, the server accepts every object `translate` emits.
//!
//! Every disagreement fails the test with its manifest. `NIMBUS_FUZZ_CASES` (default 600)
//! and `NIMBUS_FUZZ_SEED` size and seed it; `make fuzz` runs it at length.

mod common;

use common::cases::{Rng, binding_case};
use common::oracle::{self, describe, with_owner_uids};
use std::time::Instant;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|n| {
            n.parse()
                .unwrap_or_else(|_| panic!("{name} must be a number"))
        })
        .unwrap_or(default)
}

/// What the server says to every object of the case: the reasons it refuses, if any.
async fn server_verdict(
    server: &oracle::Server,
    case: &common::cases::Case,
    namespace: &str,
) -> Vec<String> {
    let mut refused = Vec::new();
    for object in [&case.intent, &case.binding]
        .into_iter()
        .chain(&case.probes)
    {
        if let Err(e) = server.dry_run(object, namespace).await {
            refused.push(format!("{}: {e}", describe(object)));
        }
    }
    refused
}

#[tokio::test]
async fn the_api_server_accepts_exactly_what_validate_accepts_and_all_that_translate_emits() {
    let (cp, server) = oracle::server().await;
    let ns = cp.test_namespace("oracle").await.expect("namespace");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("case.yaml");
    let (total, seed) = (
        env_number("NIMBUS_FUZZ_CASES", 600),
        env_number("NIMBUS_FUZZ_SEED", 0x6f72_6163_6c65),
    );
    let mut rng = Rng::new(seed);
    let started = Instant::now();
    let (mut accepted, mut refused_by_both, mut objects) = (0, 0, 0);
    let mut disagreements = Vec::new();
    for case in 0..total {
        let generated = binding_case(&mut rng, None);
        let manifest = generated.manifest();
        let refused = server_verdict(&server, &generated, ns.name()).await;
        match (oracle::validate(&file, &manifest), refused.is_empty()) {
            (Ok(()), true) => {}
            (Err(_), false) => {
                refused_by_both += 1;
                continue;
            }
            (Ok(()), false) => {
                disagreements.push(format!(
                    "case {case}: validate accepts, the server refuses: {refused:#?}\n{manifest}"
                ));
                continue;
            }
            (Err(ours), true) => {
                disagreements.push(format!(
                    "case {case}: the server accepts, validate refuses: {ours}\n{manifest}"
                ));
                continue;
            }
        }
        accepted += 1;
        let emitted = match oracle::translate(&file, ns.name()) {
            Ok(emitted) => emitted,
            Err(e) => {
                disagreements.push(format!("case {case}: translate failed: {e}\n{manifest}"));
                continue;
            }
        };
        for object in emitted {
            objects += 1;
            if let Err(e) = server
                .dry_run(&with_owner_uids(object.clone()), ns.name())
                .await
            {
                disagreements.push(format!(
                    "case {case}: the server refuses {} that translate emits: {e}\n{object:#}\nfor\n{manifest}",
                    describe(&object)
                ));
            }
        }
    }
    println!(
        "server oracle: seed {seed}, {total} cases: {accepted} accepted by both, {refused_by_both} \
         refused by both, {objects} emitted objects judged, {} disagreements, {:.1?}",
        disagreements.len(),
        started.elapsed()
    );
    assert!(
        disagreements.is_empty(),
        "{} disagreements between the API server and the CLI:\n{}",
        disagreements.len(),
        disagreements.join("\n\n")
    );
    // The generator must exercise both outcomes.
    assert!(
        accepted > 0 && refused_by_both > 0,
        "{accepted} {refused_by_both}"
    );
}
