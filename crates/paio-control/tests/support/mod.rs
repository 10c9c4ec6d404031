//! Helpers shared by paiod's integration tests.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use paio::control::{ControlClient, ControlOptions};
use paio::Stage;

/// A stage called `name` with label `job` and one channel, `read`, for
/// read requests.
pub fn stage(name: &str, job: &str) -> Arc<Stage> {
    Arc::new(
        Stage::from_policy_str(
            &format!(
                r#"
                [stage]
                name = "{name}"
                labels = {{ job = "{job}" }}
                [[channel]]
                name = "read"
                match = {{ request_type = "read" }}
                "#
            ),
            "<test>",
        )
        .unwrap(),
    )
}

/// `stage`'s control client for paiod at `socket`, reconnecting within
/// 10–100 ms.
pub fn client(stage: &Arc<Stage>, socket: &Path) -> ControlClient {
    let mut o = ControlOptions::new(socket);
    o.backoff_min = Duration::from_millis(10);
    o.backoff_max = Duration::from_millis(100);
    ControlClient::start(Arc::clone(stage), o).unwrap()
}

/// A TCP port of the loopback that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Asserts that `promtool check metrics` (Debian's prometheus package)
/// accepts the Prometheus text exposition `text`.
pub fn promtool_check(text: &str) {
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package; `make setup` installs it)");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let o = promtool.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `paio ctl set GROUP KEY=VALUE` sent to paiod at `socket`: its reply,
/// or the error (a refusal carries paiod's reason), within 10 s.
pub fn ctl_set(
    socket: &Path,
    group: &str,
    key: &str,
    value: &str,
) -> Result<paio_control::ctl::CtlReply, paio_control::ctl::CtlError> {
    paio_control::ctl::request(
        socket,
        paio_control::ctl::CtlCommand::Set {
            label: None,
            group: group.into(),
            key: key.into(),
            value: value.into(),
        },
        Duration::from_secs(10),
    )
}
