//! The cluster's etcd keys, all under `/paio/<cluster>/`.

/// The key layout of one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// The keys of cluster `name` (a name [`super::check_name`] accepts).
    pub fn new(name: &str) -> Self {
        Self {
            prefix: format!("/paio/{name}/"),
        }
    }

    /// `node/<node>`: the node's [`super::NodeReport`], bound to its lease.
    pub fn node(&self, node: &str) -> String {
        format!("{}node/{node}", self.prefix)
    }

    /// The prefix of every node's report.
    pub fn nodes(&self) -> String {
        format!("{}node/", self.prefix)
    }

    /// `alloc/<node>`: the node's [`super::NodeAllocation`].
    pub fn alloc(&self, node: &str) -> String {
        format!("{}alloc/{node}", self.prefix)
    }

    /// The prefix of every node's allocation.
    pub fn allocs(&self) -> String {
        format!("{}alloc/", self.prefix)
    }

    /// `leader`: the [`super::LeaderRecord`], bound to the leader's lease.
    pub fn leader(&self) -> String {
        format!("{}leader", self.prefix)
    }

    /// `job/<job>`: the job's [`super::JobRecord`].
    pub fn job(&self, job: &str) -> String {
        format!("{}job/{job}", self.prefix)
    }

    /// The prefix of every job's configuration.
    pub fn jobs(&self) -> String {
        format!("{}job/", self.prefix)
    }

    /// `summary`: the leader's [`super::leader::Summary`].
    pub fn summary(&self) -> String {
        format!("{}summary", self.prefix)
    }

    /// `policy`: the cluster's [`super::PolicyRecord`].
    pub fn policy(&self) -> String {
        format!("{}policy", self.prefix)
    }

    /// The last segment of `key` under `prefix` (a node or job name), if
    /// `key` is under it.
    pub fn name_in<'a>(key: &'a [u8], prefix: &str) -> Option<&'a str> {
        std::str::from_utf8(key).ok()?.strip_prefix(prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_live_under_the_cluster_prefix() {
        let k = Keys::new("c1");
        assert_eq!(k.node("n1"), "/paio/c1/node/n1");
        assert_eq!(k.alloc("n1"), "/paio/c1/alloc/n1");
        assert_eq!(k.job("j"), "/paio/c1/job/j");
        assert_eq!(k.leader(), "/paio/c1/leader");
        assert_eq!(k.policy(), "/paio/c1/policy");
        assert_eq!(Keys::name_in(b"/paio/c1/node/n1", &k.nodes()), Some("n1"));
        assert_eq!(Keys::name_in(b"/paio/c2/node/n1", &k.nodes()), None);
    }
}
