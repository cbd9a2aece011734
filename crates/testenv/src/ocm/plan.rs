//! What a fleet is started with.

use std::collections::BTreeMap;

/// A managed cluster to start.
#[derive(Clone, Debug)]
pub struct ClusterPlan {
    /// The cluster's name: also its namespace, on the hub and on the cluster itself.
    pub name: String,
    /// The labels of its ManagedCluster on the hub: what Placements select and hub templates
    /// read.
    pub labels: BTreeMap<String, String>,
}

impl ClusterPlan {
    pub fn new<'a>(name: &str, labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self {
            name: name.to_owned(),
            labels: (labels.into_iter())
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        }
    }
}
