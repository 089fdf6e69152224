#!/usr/bin/env bash
# Writes the tokenizer test corpus (UTF-8, about 1.3 MB) to $1, offline and deterministically, from
# text that Debian 12 ships (`make test` installs the packages: scripts/install-deps.sh):
#   - iso-codes: the translations of the country names (iso_3166-1) into every language it has, and the
#     language names (iso_639-3) in Japanese, Traditional Chinese, Korean, Thai, Greek and Vietnamese
#     (LGPL-2.1+; /usr/share/doc/iso-codes/copyright), read with gettext's msgunfmt;
#   - the GPL-3 and Apache-2.0 texts of base-files (/usr/share/common-licenses: verbatim copies allowed);
#   - lines written here for the cases a tokenizer gets wrong: emoji (ZWJ sequences, skin tones, flags),
#     combining marks, CJK, contractions, digits, and runs of every kind of Unicode white space.
# The same packages give the same corpus; the expected tokens are computed from it by tiktoken.
set -euo pipefail
out=${1:?usage: make_corpus.sh OUTPUT}
# C.UTF-8: ls and sort order bytewise, and printf writes \uXXXX escapes as UTF-8.
export LC_ALL=C.UTF-8
command -v msgunfmt >/dev/null || { echo "make_corpus.sh: msgunfmt missing (apt-get install gettext)" >&2; exit 1; }
locale_dir=/usr/share/locale
[[ -f $locale_dir/ja/LC_MESSAGES/iso_639-3.mo ]] || { echo "make_corpus.sh: iso-codes translations missing (apt-get install iso-codes)" >&2; exit 1; }

{
  for mo in $(ls $locale_dir/*/LC_MESSAGES/iso_3166-1.mo | sort); do
    msgunfmt --no-wrap "$mo" | sed -n 's/^msgstr "\(.*\)"$/\1/p'
  done
  for lang in ja zh_TW ko th el vi; do
    msgunfmt --no-wrap "$locale_dir/$lang/LC_MESSAGES/iso_639-3.mo"
  done
  cat /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0
  printf '%s\n' \
    "Emoji: 😀😃😄 👍🏽 👩‍👩‍👧‍👦 🧑🏿‍🚀 🇫🇷🇯🇵🇧🇷 🏳️‍🌈 ❤️ ✊🏾 1️⃣ #️⃣ 🫠🫶 😀😀😀😀😀😀😀😀" \
    "CJK: 日本語のテキストと漢字、ひらがな、カタカナ。中文：我们的模型。한국어 문장입니다. ｆｕｌｌｗｉｄｔｈ ＡＢＣ１２３ 〇〻" \
    "Contractions: don't I'll they've she's we're I'm he'd DON'T I'LL THEY'VE It’s rock'n'roll 'tis o'clock ''s '''ll" \
    "Digits: 3.14159265358979 1,000,000 0x7fffffff 2026-11-26 ١٢٣ ४५६ ½¾ ⅓ Ⅻ 12345678901234567890123456789"
  printf 'Combining marks: e\u0301 a\u0300\u0323 n\u0303 o\u0308\u0304 Z\u0351\u0358\u0360\u036a\u0307\u0300 Tiếng Việt có dấu; हिन्दी क्षत्रिय; עִבְרִית; العَرَبِيَّة\n'
  printf 'Spaces:%s|tabs:\t\t\t|mixed: \t \t  |end\n' "$(printf '%*s' 40 '')"
  printf 'Unicode spaces:\u00a0\u00a0|\u3000\u3000|\u2003\u2009\u202f|\u2028|\u0085|\u200b(zero width, not a space)\n'
  printf 'CRLF line\r\nand a bare CR\rin the middle\r\n\n\n\n  \n\t\n'
  printf 'Long run: %s|\n' "$(printf '%*s' 3000 '')"
  printf 'Long word: %s\n' "$(printf 'ab%.0s' $(seq 1 600))"
  printf 'Trailing spaces then text   \n   leading spaces\n    '
} > "$out.tmp"
mv "$out.tmp" "$out"
