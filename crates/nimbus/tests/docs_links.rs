//! Every internal link of the book (docs/src) and of the READMEs that point into it leads
//! somewhere: the file exists, and its `#anchor` is an id mdBook gives a heading of that page.
//!
//! Our own check rather than mdbook-linkcheck: its last release (0.7.7) cannot read mdBook
//! 0.5's render context ("missing field `sections`", mdbook-linkcheck issue #96; the fix is an
//! unreleased pull request), and it never checks anchors (its issue #52), which is most of what
//! breaks when text moves between pages. Web links are not followed: tests run offline.
//!
//! Heading ids are computed as mdBook 0.5 does (mdbook-html's `id_from_content` and
//! `unique_id`, with the parser options of mdbook-markdown's `new_cmark_parser`): the text of
//! the heading, trimmed and lowercased, alphanumerics, `_` and `-` kept, whitespace turned into
//! `-`, everything else dropped; a repeated id gets `-1`, `-2`, … on the same page; an explicit
//! `{#id}` wins.

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Component, Path, PathBuf};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The options mdBook 0.5 parses chapters with (smart punctuation changes heading text, so
/// it changes ids).
fn mdbook_options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_HEADING_ATTRIBUTES
        | Options::ENABLE_SMART_PUNCTUATION
        | Options::ENABLE_DEFINITION_LIST
        | Options::ENABLE_GFM
}

/// mdBook's id for a heading whose text is `content`.
fn id_from_content(content: &str) -> String {
    content
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|ch| {
            if ch.is_alphanumeric() || ch == '_' || ch == '-' {
                Some(ch)
            } else if ch.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// `id`, or with the first free `-N` suffix when the page already has it.
fn unique_id(id: &str, used: &mut HashSet<String>) -> String {
    if used.insert(id.to_owned()) {
        return id.to_owned();
    }
    (1..)
        .map(|n| format!("{id}-{n}"))
        .find(|candidate| used.insert(candidate.clone()))
        .unwrap_or_default()
}

/// A link as written, and the line it is on.
struct Link {
    destination: String,
    line: usize,
}

/// What one Markdown page offers and asks: the ids of its headings, and its links.
struct Page {
    ids: BTreeSet<String>,
    links: Vec<Link>,
}

fn parse(text: &str) -> Page {
    let mut used = HashSet::new();
    let mut ids = BTreeSet::new();
    let mut links = Vec::new();
    // The heading (or definition term) being read: its explicit id, and its text so far.
    let mut heading: Option<(Option<String>, String)> = None;
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    for (event, range) in Parser::new_ext(text, mdbook_options()).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { id, .. }) => {
                heading = Some((id.map(|id| id.to_string()), String::new()));
            }
            Event::Start(Tag::DefinitionListTitle) => heading = Some((None, String::new())),
            Event::Text(t) | Event::Code(t) => {
                if let Some((_, content)) = heading.as_mut() {
                    content.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_) | TagEnd::DefinitionListTitle) => {
                if let Some((explicit, content)) = heading.take() {
                    let id = explicit.unwrap_or_else(|| id_from_content(&content));
                    ids.insert(unique_id(&id, &mut used));
                }
            }
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                links.push(Link {
                    destination: dest_url.to_string(),
                    line: line_of(range.start),
                });
            }
            _ => {}
        }
    }
    Page { ids, links }
}

/// `path` without `.` and `..` components (the files need not exist).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            markdown_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// Every broken link of `files` (paths relative to `root`), as `file:line: destination: why`.
/// A link may leave the book only from a file outside it (the READMEs): mdBook publishes
/// nothing but docs/src, so a link from a chapter to the repository's other files is broken
/// on the site.
fn broken_links(root: &Path, files: &[PathBuf]) -> Vec<String> {
    let book = normalize(&root.join("docs/src"));
    let mut pages: BTreeMap<PathBuf, Page> = BTreeMap::new();
    let mut page = |path: &Path| -> Option<BTreeSet<String>> {
        if !pages.contains_key(path) {
            let text = std::fs::read_to_string(path).ok()?;
            pages.insert(path.to_owned(), parse(&text));
        }
        pages.get(path).map(|p| p.ids.clone())
    };
    let mut broken = Vec::new();
    for file in files {
        let file = normalize(&root.join(file));
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        let in_book = file.starts_with(&book);
        for link in parse(&text).links {
            let destination = link.destination.as_str();
            if destination.contains("://") || destination.starts_with("mailto:") {
                continue;
            }
            let (target, anchor) = destination.split_once('#').unwrap_or((destination, ""));
            let target_path = if target.is_empty() {
                file.clone()
            } else {
                normalize(&file.parent().expect("a file's directory").join(target))
            };
            let why = if in_book && !target_path.starts_with(&book) {
                Some("leaves the book (mdBook publishes only docs/src)".to_owned())
            } else if !target_path.exists() {
                Some("no such file".to_owned())
            } else if anchor.is_empty() {
                None
            } else if target_path.extension().is_none_or(|e| e != "md") {
                Some("an anchor into a file that is not a page".to_owned())
            } else {
                match page(&target_path) {
                    Some(ids) if ids.contains(anchor) => None,
                    _ => Some(format!("no heading with the id `{anchor}` there")),
                }
            };
            if let Some(why) = why {
                let shown = file.strip_prefix(normalize(root)).unwrap_or(&file);
                broken.push(format!(
                    "{}:{}: {destination}: {why}",
                    shown.display(),
                    link.line
                ));
            }
        }
    }
    broken
}

#[test]
fn every_internal_link_and_anchor_of_the_book_resolves() {
    let root = normalize(&workspace_root());
    let mut files = Vec::new();
    markdown_files(&root.join("docs/src"), &mut files);
    files.push(root.join("README.md"));
    files.push(root.join("charts/nimbus/README.md"));
    assert!(files.len() > 10, "too few pages found: {files:?}");
    let broken = broken_links(&root, &files);
    assert!(
        broken.is_empty(),
        "{} broken links:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

/// mdBook renders only the pages SUMMARY.md lists: any other page in docs/src is unreachable
/// on the site, and a link to it breaks there.
#[test]
fn every_page_of_the_book_is_in_the_summary() {
    let root = normalize(&workspace_root());
    let src = root.join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).expect("docs/src/SUMMARY.md");
    let listed: BTreeSet<PathBuf> = parse(&summary)
        .links
        .iter()
        .map(|l| normalize(&src.join(&l.destination)))
        .collect();
    let mut files = Vec::new();
    markdown_files(&src, &mut files);
    let unlisted: Vec<String> = files
        .iter()
        .map(|f| normalize(f))
        .filter(|f| !f.ends_with("SUMMARY.md") && !listed.contains(f))
        .map(|f| f.display().to_string())
        .collect();
    assert!(unlisted.is_empty(), "not in SUMMARY.md: {unlisted:?}");
}

/// The ids are mdBook's: the cases of mdbook-html's own tests, and duplicates.
#[test]
fn heading_ids_are_mdbooks() {
    assert_eq!(
        id_from_content("`--passes`: add more rustdoc passes"),
        "--passes-add-more-rustdoc-passes"
    );
    assert_eq!(id_from_content("Über"), "über");
    let page = parse(
        "# Kyverno's policy kinds\n\n## Uninstalling\n\n## Uninstalling\n\n## Custom {#own-id}\n",
    );
    let ids: Vec<&str> = page.ids.iter().map(String::as_str).collect();
    assert_eq!(
        ids,
        [
            "kyvernos-policy-kinds",
            "own-id",
            "uninstalling",
            "uninstalling-1"
        ]
    );
}

/// The check finds what it is for: a missing page, a missing anchor, a link out of the book.
#[test]
fn a_broken_link_or_anchor_is_reported() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let src = dir.path().join("docs/src");
    std::fs::create_dir_all(&src).expect("docs/src");
    std::fs::write(src.join("a.md"), "# A\n\n## Real heading\n").expect("a.md");
    std::fs::write(dir.path().join("outside.md"), "# Outside\n").expect("outside.md");
    std::fs::write(
        src.join("b.md"),
        "# B\n\n[ok](a.md#real-heading) [here](#b) [web](https://example.com/#x)\n\
         [gone](missing.md) [bad anchor](a.md#unreal-heading)\n[out](../../outside.md)\n",
    )
    .expect("b.md");
    let broken = broken_links(dir.path(), &[PathBuf::from("docs/src/b.md")]);
    assert_eq!(
        broken,
        [
            "docs/src/b.md:4: missing.md: no such file",
            "docs/src/b.md:4: a.md#unreal-heading: no heading with the id `unreal-heading` there",
            "docs/src/b.md:5: ../../outside.md: leaves the book (mdBook publishes only docs/src)",
        ]
    );
}
