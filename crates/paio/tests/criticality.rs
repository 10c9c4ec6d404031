//! The process-wide criticality mark, in its own test process (it would
//! change every other test's requests).

use paio::criticality::{process_critical, set_process_critical, set_thread_critical};
use paio::{Context, Criticality, RequestType, Stage};

#[test]
fn process_mark_applies_to_every_thread_and_routes() {
    let stage = Stage::from_policy_str(
        r#"
        [[channel]]
        name = "critical"
        match = { criticality = "critical" }
        [[channel]]
        name = "background"
        match = { criticality = "normal" }
        "#,
        "<process-critical>",
    )
    .unwrap();
    let read = || Context::new(RequestType::READ, 1);
    assert_eq!(stage.route(&read()).unwrap().0, "background");
    set_process_critical(true);
    assert!(process_critical());
    assert_eq!(stage.route(&read()).unwrap().0, "critical");
    let other = std::thread::spawn(move || Context::new(RequestType::READ, 1).criticality)
        .join()
        .unwrap();
    assert_eq!(other, Criticality::Critical, "every thread of the process");
    set_thread_critical(false); // a thread cannot opt out of the process mark
    assert_eq!(read().criticality, Criticality::Critical);
    set_process_critical(false);
    assert_eq!(stage.route(&read()).unwrap().0, "background");
}
