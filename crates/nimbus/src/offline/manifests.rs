//! Reading manifests: files, directories and standard input, parsed into the objects the
//! offline commands check and translate, with what the API server would refuse.

use anyhow::Context as _;
use kube::{Resource, ResourceExt};
use nimbus_api::{
    ClusterSecurityIntentBinding, ClusterSecurityIntentException, GROUP, SecurityIntent,
    SecurityIntentBinding, SecurityIntentException, VERSION,
};
use nimbus_core::exceptions::Exception;
use nimbus_core::validation;
use serde_json::Value;
use std::collections::HashSet;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The manifests to read, given as `-f FILE` (as kubectl takes them) or as plain arguments (as
/// Kyverno's CLI does), or both.
#[derive(clap::Args)]
#[group(required = true, multiple = true)]
pub struct Inputs {
    /// Manifest files or directories (*.yaml, *.yml, *.json, recursively); `-` reads standard
    /// input.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub(super) files: Vec<PathBuf>,
    /// The same, as arguments.
    #[arg(value_name = "FILE")]
    pub(super) paths: Vec<PathBuf>,
}

impl Inputs {
    /// Every file or directory given, `-f` ones first.
    fn all(&self) -> impl Iterator<Item = &PathBuf> {
        self.files.iter().chain(&self.paths)
    }
}

/// Where a problem comes from.
#[derive(Clone, Debug)]
pub(super) struct Origin {
    pub(super) file: String,
    pub(super) document: usize,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (document {})", self.file, self.document + 1)
    }
}

/// The values the CRD allows for `spec.intent.action`.
const ACTIONS: [&str; 2] = ["Block", "Audit"];

pub(super) enum Manifest {
    Intent(SecurityIntent),
    Binding(SecurityIntentBinding),
    ClusterBinding(ClusterSecurityIntentBinding),
    Exception(SecurityIntentException),
    ClusterException(ClusterSecurityIntentException),
}

impl Manifest {
    /// `<Kind> <name>`, for messages.
    pub(super) fn describe(&self) -> String {
        match self {
            Manifest::Intent(si) => format!("SecurityIntent {}", si.name_any()),
            Manifest::Binding(b) => format!("SecurityIntentBinding {}", b.name_any()),
            Manifest::ClusterBinding(b) => {
                format!("ClusterSecurityIntentBinding {}", b.name_any())
            }
            Manifest::Exception(e) => format!("SecurityIntentException {}", e.name_any()),
            Manifest::ClusterException(e) => {
                format!("ClusterSecurityIntentException {}", e.name_any())
            }
        }
    }

    /// What the API server checks before it accepts the object beyond what parsing checked: a
    /// DNS-1123 subdomain name, a DNS-1123 label namespace (bindings), valid labels and
    /// annotation keys, an intent's action among the CRD's values, and what the exception CRD
    /// requires of an exception.
    pub(super) fn admission_problems(&self) -> Vec<String> {
        let (meta, namespaced) = match self {
            Manifest::Intent(si) => (&si.metadata, false),
            Manifest::Binding(b) => (&b.metadata, true),
            Manifest::ClusterBinding(b) => (&b.metadata, false),
            Manifest::Exception(e) => (&e.metadata, true),
            Manifest::ClusterException(e) => (&e.metadata, false),
        };
        let mut out = validation::object_name(meta.name.as_deref(), "metadata.name");
        if let (true, Some(ns)) = (namespaced, &meta.namespace) {
            out.extend(validation::namespace_name(ns, "metadata.namespace"));
        }
        if let Some(labels) = &meta.labels {
            out.extend(validation::labels(labels, "metadata.labels"));
        }
        if let Some(annotations) = &meta.annotations {
            out.extend(validation::annotations(annotations, "metadata.annotations"));
        }
        if let Manifest::Intent(si) = self
            && !ACTIONS.contains(&si.spec.intent.action.as_str())
        {
            out.push(format!(
                "action `{}` must be {} (the CRD refuses anything else)",
                si.spec.intent.action,
                ACTIONS.join(" or ")
            ));
        }
        match self {
            Manifest::Exception(e) => out.extend(exception_problems(e.into())),
            Manifest::ClusterException(e) => out.extend(exception_problems(e.into())),
            _ => {}
        }
        out
    }
}

/// What the exception CRDs' schemas refuse beyond what parsing checked.
fn exception_problems(exception: Exception) -> Vec<String> {
    let binding = exception.binding();
    let bindings = match exception {
        Exception::Namespaced(_) => vec![
            SecurityIntentBinding::kind(&()),
            ClusterSecurityIntentBinding::kind(&()),
        ],
        Exception::Cluster(_) => vec![ClusterSecurityIntentBinding::kind(&())],
    };
    let mut out = Vec::new();
    if !bindings.contains(&binding.kind.as_str().into()) {
        out.push(format!(
            "spec.binding.kind `{}` must be {} (the CRD refuses anything else)",
            binding.kind,
            bindings.join(" or ")
        ));
    }
    let namespaces = match exception {
        Exception::Namespaced(_) => None,
        Exception::Cluster(e) => Some(&e.spec.namespaces),
    };
    let required = [
        ("spec.binding.name", binding.name.is_empty()),
        ("spec.intents", exception.intents().is_empty()),
        ("spec.namespaces", namespaces.is_some_and(Vec::is_empty)),
        ("spec.reason", exception.reason().is_empty()),
        (
            "spec.workloads[].name",
            exception.workloads().iter().any(|w| w.name.is_empty()),
        ),
    ];
    for (field, empty) in required {
        if empty {
            out.push(format!("{field} must not be empty (the CRD refuses it)"));
        }
    }
    // Unknown control names fail parsing; an empty list or a repeated name, the CRD's
    // `minItems` and list type `set`.
    if let Some(controls) = exception.pod_security_controls() {
        let distinct: std::collections::BTreeSet<_> = controls.iter().collect();
        if controls.is_empty() {
            out.push(
                "spec.podSecurityControls must not be empty; leave it out to except the whole \
                 intents (the CRD refuses it)"
                    .to_owned(),
            );
        } else if distinct.len() < controls.len() {
            out.push(
                "spec.podSecurityControls names a control twice (the CRD refuses it)".to_owned(),
            );
        }
    }
    out
}

/// The manifests that parsed, and one message per problem found on the way.
pub(super) struct Loaded {
    pub(super) manifests: Vec<(Origin, Manifest)>,
    pub(super) errors: Vec<String>,
}

pub(super) fn load(inputs: &Inputs) -> Loaded {
    let mut loaded = Loaded {
        manifests: Vec::new(),
        errors: Vec::new(),
    };
    // Files already read, by canonical path: each is read once, whichever inputs name it.
    let mut seen = HashSet::new();
    for path in inputs.all() {
        match read_all(path, &mut seen) {
            Ok(files) => {
                for (file, text) in files {
                    parse(&file, &text, &mut loaded);
                }
            }
            Err(e) => loaded.errors.push(format!("{e:#}")),
        }
    }
    loaded
}

/// `(display name, contents)` of a file, every manifest file under a directory, or stdin;
/// but none of the files in `seen`.
fn read_all(path: &Path, seen: &mut HashSet<PathBuf>) -> anyhow::Result<Vec<(String, String)>> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading standard input")?;
        return Ok(vec![("<stdin>".into(), text)]);
    }
    let mut files = Vec::new();
    collect_manifest_files(path, seen, &mut files)?;
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("{}: cannot read file", file.display()))?;
            Ok((file.display().to_string(), text))
        })
        .collect()
}

/// `path` itself, or the *.yaml, *.yml and *.json files under the directory `path`, recursively,
/// in name order; each file once, however many links lead to it (so a link loop ends).
#[cfg(feature = "dev")]
pub fn manifest_files(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    collect_manifest_files(path, &mut HashSet::new(), &mut files)?;
    Ok(files)
}

/// [`manifest_files`] of `path` into `files`, skipping what `seen` holds (canonical paths).
fn collect_manifest_files(
    path: &Path,
    seen: &mut HashSet<PathBuf>,
    files: &mut Vec<PathBuf>,
) -> anyhow::Result<()> {
    // What cannot be resolved is kept as named: reading it reports why.
    let canonical = path.canonicalize().unwrap_or_else(|_| path.to_owned());
    if !seen.insert(canonical) {
        return Ok(());
    }
    if !path.is_dir() {
        files.push(path.to_owned());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("{}: cannot read directory", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_dir()
                || p.extension()
                    .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
        })
        .collect();
    entries.sort();
    for entry in entries {
        collect_manifest_files(&entry, seen, files)?;
    }
    Ok(())
}

/// Deepest nesting accepted in an input file: flow collections (`[`, `{`) inside each other,
/// or block sequences opened on one line (`- - -`). Kubernetes objects nest far less, and the
/// parser takes super-linear time on deep nesting, so deeper input is refused by a linear scan
/// before it is parsed.
const MAX_NESTING: usize = 100;

/// The 1-based line where `text` first nests deeper than [`MAX_NESTING`], if it does.
fn too_deep(text: &str) -> Option<usize> {
    let (mut depth, mut line) = (0usize, 0);
    let mut quote: Option<char> = None;
    let mut previous = '\n';
    // Read as if after a line break, so that the first line is read as every other.
    let mut chars = std::iter::once('\n').chain(text.chars()).peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (_, '\n') => {
                line += 1;
                // A block sequence entry opening at the start of a line, and those after it.
                let mut block = 0;
                while chars.peek().is_some_and(|c| *c == ' ') {
                    chars.next();
                }
                while chars.peek() == Some(&'-') {
                    chars.next();
                    if chars.peek().is_none_or(|c| *c != ' ') {
                        break;
                    }
                    block += 1;
                    while chars.peek().is_some_and(|c| *c == ' ') {
                        chars.next();
                    }
                }
                if quote.is_none() && depth + block > MAX_NESTING {
                    return Some(line);
                }
                previous = ' ';
                continue;
            }
            (Some('"'), '\\') => {
                chars.next();
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            // A quote opens a scalar only where one starts (not the one in `it's`).
            (None, '"' | '\'') if " \t[{,:\n".contains(previous) => quote = Some(c),
            (None, '#') if previous.is_whitespace() => {
                while chars.peek().is_some_and(|c| *c != '\n') {
                    chars.next();
                }
            }
            (None, '[' | '{') => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Some(line);
                }
            }
            (None, ']' | '}') => depth = depth.saturating_sub(1),
            (None, _) => {}
        }
        previous = c;
    }
    None
}

pub(super) fn parse(file: &str, text: &str, loaded: &mut Loaded) {
    if let Some(line) = too_deep(text) {
        loaded.errors.push(format!(
            "{file}: nested more than {MAX_NESTING} levels deep at line {line}; not parsed"
        ));
        return;
    }
    for (document, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let origin = Origin {
            file: file.to_owned(),
            document,
        };
        let value = match <Value as serde::Deserialize>::deserialize(doc) {
            Ok(Value::Null) => continue,
            Ok(v) => v,
            Err(e) => {
                loaded
                    .errors
                    .push(format!("{origin}: malformed YAML/JSON: {e}"));
                // The rest of the stream cannot be trusted after a syntax error.
                return;
            }
        };
        match manifest(value) {
            Ok(m) => loaded.manifests.push((origin, m)),
            Err(e) => loaded.errors.push(format!("{origin}: {e}")),
        }
    }
}

fn manifest(value: Value) -> Result<Manifest, String> {
    let api_version = value["apiVersion"].as_str().unwrap_or_default().to_owned();
    let kind = value["kind"].as_str().unwrap_or_default().to_owned();
    let name = value["metadata"]["name"].as_str().unwrap_or("?").to_owned();
    let typed = |e: serde_json::Error| format!("{kind} {name}: {e}");
    // Exceptions have an API group of their own.
    let exceptions = SecurityIntentException::api_version(&());
    if api_version == exceptions {
        return match kind.as_str() {
            "SecurityIntentException" => serde_json::from_value(value)
                .map(Manifest::Exception)
                .map_err(typed),
            "ClusterSecurityIntentException" => serde_json::from_value(value)
                .map(Manifest::ClusterException)
                .map_err(typed),
            other => Err(format!("unknown kind `{other}` in {exceptions}")),
        };
    }
    if api_version != format!("{GROUP}/{VERSION}") {
        return Err(format!(
            "unknown kind `{kind}` of `{api_version}` (expected SecurityIntent, SecurityIntentBinding or ClusterSecurityIntentBinding of {GROUP}/{VERSION}, or SecurityIntentException or ClusterSecurityIntentException of {exceptions})"
        ));
    }
    match kind.as_str() {
        "SecurityIntent" => serde_json::from_value(value)
            .map(Manifest::Intent)
            .map_err(typed),
        "SecurityIntentBinding" => serde_json::from_value(value)
            .map(Manifest::Binding)
            .map_err(typed),
        "ClusterSecurityIntentBinding" => serde_json::from_value(value)
            .map(Manifest::ClusterBinding)
            .map_err(typed),
        other => Err(format!("unknown kind `{other}` in {GROUP}/{VERSION}")),
    }
}
