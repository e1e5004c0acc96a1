//! Suggesting the name a user probably meant, for the errors that refuse an unknown one.

/// Longest name compared, in characters: a longer input is not a typo of a short name.
const NAME_CHARS_MAX: usize = 64;

/// ` (did you mean 'x'?)` for the accepted name `given` is closest to, when it is close
/// (an edit or two for a short name, about a third of its length for a longer one, or a
/// prefix of it), else an empty string.
pub fn did_you_mean<'a>(given: &str, accepted: impl IntoIterator<Item = &'a str>) -> String {
    let g: Vec<char> = given.trim().to_lowercase().chars().collect();
    if g.is_empty() || g.len() > NAME_CHARS_MAX {
        return String::new();
    }
    let mut best: Option<(usize, &str)> = None;
    for name in accepted {
        let n: Vec<char> = name.chars().collect();
        let d = if n.starts_with(&g) && g.len() >= 2 {
            1
        } else {
            edit_distance(&g, &n)
        };
        let close = d <= (n.len() / 3).max(1);
        if close && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, name));
        }
    }
    match best {
        Some((_, name)) => format!(" (did you mean '{name}'?)"),
        None => String::new(),
    }
}

/// Edits (insert, delete, substitute, swap two neighbours) from `a` to `b`: the optimal
/// string alignment distance, so `tiyn` is one edit from `tiny`.
fn edit_distance(a: &[char], b: &[char]) -> usize {
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    for (j, cell) in d.iter_mut().enumerate().take(w) {
        *cell = j;
    }
    for i in 1..=a.len() {
        d[i * w] = i;
        for j in 1..=b.len() {
            let sub = d[(i - 1) * w + j - 1] + usize::from(a[i - 1] != b[j - 1]);
            let mut best = sub.min(d[(i - 1) * w + j] + 1).min(d[i * w + j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[(i - 2) * w + j - 2] + 1);
            }
            d[i * w + j] = best;
        }
    }
    d[a.len() * w + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_or_a_prefix_gets_the_closest_name_and_a_stranger_gets_none() {
        let protocols = [
            "nowait", "waitdie", "occ", "mvcc", "sundial", "rsi", "namdb",
        ];
        assert_eq!(did_you_mean("occc", protocols), " (did you mean 'occ'?)");
        assert_eq!(
            did_you_mean("sundail", protocols),
            " (did you mean 'sundial'?)"
        );
        assert_eq!(did_you_mean("NAMDB", protocols), " (did you mean 'namdb'?)");
        assert_eq!(
            did_you_mean("shared", ["partitioned", "shared-data"]),
            " (did you mean 'shared-data'?)"
        );
        assert_eq!(
            did_you_mean("tiyn", ["tiny", "all"]),
            " (did you mean 'tiny'?)"
        );
        assert_eq!(did_you_mean("postgres", protocols), "");
        assert_eq!(did_you_mean("", protocols), "");
        assert_eq!(did_you_mean(&"x".repeat(1000), protocols), "");
    }
}
