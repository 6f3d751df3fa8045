//! The checks, one module per section of the specification, in the specification's order.
//! Each module's `checks()` lists its rules; [`all`] concatenates them.

use crate::framework::{Check, Section};

pub mod auth;
pub mod chunking;
pub mod compression;
pub mod deletion;
pub mod dryrun;
pub mod errors;
pub mod lifecycle;
pub mod media;
pub mod objects;
pub mod rv;
pub mod serviceaccounts;
pub mod updates;
pub mod uri;
pub mod validation;
pub mod watch;

pub static OBJECTS: Section = Section {
    number: "2",
    title: "Resources and their fields",
    slug: "objects",
};
pub static LIFECYCLE: Section = Section {
    number: "3",
    title: "States and transitions (deletion and finalizers)",
    slug: "lifecycle",
};
pub static URI: Section = Section {
    number: "4.1",
    title: "URI layout",
    slug: "uri",
};
pub static SERVICEACCOUNTS: Section = Section {
    number: "4.2",
    title: "ServiceAccount operations",
    slug: "serviceaccounts",
};
pub static MEDIA: Section = Section {
    number: "4.3",
    title: "Media types and content negotiation",
    slug: "media",
};
pub static CHUNKING: Section = Section {
    number: "4.4",
    title: "List, chunked retrieval and collections",
    slug: "chunking",
};
pub static WATCH: Section = Section {
    number: "4.5",
    title: "Watch",
    slug: "watch",
};
pub static UPDATES: Section = Section {
    number: "4.6",
    title: "Updating existing resources",
    slug: "updates",
};
pub static DRYRUN: Section = Section {
    number: "4.7",
    title: "Dry run",
    slug: "dryrun",
};
pub static DELETION: Section = Section {
    number: "4.8",
    title: "Deletion options",
    slug: "deletion",
};
pub static VALIDATION: Section = Section {
    number: "4.9",
    title: "Field validation",
    slug: "validation",
};
pub static COMPRESSION: Section = Section {
    number: "4.10",
    title: "Response compression",
    slug: "compression",
};
pub static RV: Section = Section {
    number: "4.11",
    title: "Resource version parameter semantics",
    slug: "resourceversion",
};
pub static AUTH: Section = Section {
    number: "5",
    title: "Authentication and authorization",
    slug: "auth",
};
pub static ERRORS: Section = Section {
    number: "7",
    title: "Errors",
    slug: "errors",
};

/// Every section, in the specification's order.
pub fn sections() -> Vec<&'static Section> {
    vec![
        &OBJECTS,
        &LIFECYCLE,
        &URI,
        &SERVICEACCOUNTS,
        &MEDIA,
        &CHUNKING,
        &WATCH,
        &UPDATES,
        &DRYRUN,
        &DELETION,
        &VALIDATION,
        &COMPRESSION,
        &RV,
        &AUTH,
        &ERRORS,
    ]
}

/// Every check, in the specification's order.
pub fn all() -> Vec<Check> {
    let mut checks = Vec::new();
    checks.extend(objects::checks());
    checks.extend(lifecycle::checks());
    checks.extend(uri::checks());
    checks.extend(serviceaccounts::checks());
    checks.extend(media::checks());
    checks.extend(chunking::checks());
    checks.extend(watch::checks());
    checks.extend(updates::checks());
    checks.extend(dryrun::checks());
    checks.extend(deletion::checks());
    checks.extend(validation::checks());
    checks.extend(compression::checks());
    checks.extend(rv::checks());
    checks.extend(auth::checks());
    checks.extend(errors::checks());
    checks
}

/// The checks of the sections named in `only` (numbers like `4.5`, names like `watch`, or a
/// section and its subsections: `4` is all of §4); all when `only` is empty.
pub fn select(only: &[String]) -> Result<Vec<Check>, String> {
    let sections = sections();
    for name in only {
        let known = sections.iter().any(|s| matches(s, name));
        if !known {
            let names: Vec<String> = sections
                .iter()
                .map(|s| format!("{} ({})", s.number, s.slug))
                .collect();
            return Err(format!(
                "--only {name}: no such section; the sections are {}",
                names.join(", ")
            ));
        }
    }
    Ok(all()
        .into_iter()
        .filter(|c| only.is_empty() || only.iter().any(|name| matches(c.section, name)))
        .collect())
}

fn matches(section: &Section, name: &str) -> bool {
    let name = name.trim_start_matches('§');
    section.slug.eq_ignore_ascii_case(name)
        || section.number == name
        || section.number.starts_with(&format!("{name}."))
}

/// `--list`: the sections and their checks.
pub fn listing() -> String {
    let checks = all();
    let mut out = String::new();
    for section in sections() {
        out.push_str(&format!(
            "§{} {} ({})\n",
            section.number, section.title, section.slug
        ));
        for c in checks.iter().filter(|c| std::ptr::eq(c.section, section)) {
            out.push_str(&format!("  {:<44} {}\n", c.id, c.description));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_sections_listed_in_order() {
        let checks = all();
        let mut ids: Vec<&str> = checks.iter().map(|c| c.id).collect();
        ids.sort();
        let before = ids.len();
        ids.dedup();
        assert_eq!(before, ids.len(), "duplicate check ids");
        let sections = sections();
        let mut last = 0;
        for c in &checks {
            let at = sections
                .iter()
                .position(|s| std::ptr::eq(*s, c.section))
                .expect("section listed");
            assert!(at >= last, "{} is out of the specification's order", c.id);
            last = at;
        }
    }

    #[test]
    fn only_takes_numbers_names_and_parents() {
        let four_one = select(&["4.1".into()]).unwrap();
        assert!(!four_one.is_empty() && four_one.iter().all(|c| c.section.number == "4.1"));
        let uri = select(&["uri".into()]).unwrap();
        assert_eq!(uri.len(), four_one.len());
        let four = select(&["4".into()]).unwrap();
        assert!(four.iter().all(|c| c.section.number.starts_with("4.")));
        assert!(select(&["nope".into()]).is_err());
    }
}
