# Sourced by the precision scripts: the fixed token stream of #26's acceptance runs, through GPT-2's
# tokenizer (`trident data prepare`), chosen by STREAM:
#   licenses  Debian's licence texts (/usr/share/common-licenses, eight of them): 33,496 tokens, so 300
#             steps of 2 x 256 tokens pass over it 4.6 times and the model memorises it; the windows it
#             has memorised (steps 63-64, 128-129, 194-195, 259-260 in order) are the runs' chaotic ones.
#   fortunes  Debian's fortunes package (/usr/share/games/fortunes, every collection but ascii-art, in
#             name order): 728,410 tokens, so 300 such steps read each token at most once (0.6% of the
#             first 154k tokens' 32-token runs occur earlier in them): a pre-training-like stream.
# prepare_token_stream BUILD_DIR DIR: writes DIR/STREAM_train_000000.bin and sets token_shard to it.
prepare_token_stream() {
  local build=$1 dir=$2 files
  case "${STREAM:=licenses}" in
    licenses)
      local L=/usr/share/common-licenses
      files=("$L/Apache-2.0" "$L/Artistic" "$L/BSD" "$L/GFDL-1.3" "$L/GPL-2" "$L/GPL-3" "$L/LGPL-2.1" "$L/MPL-2.0");;
    fortunes)
      local F=/usr/share/games/fortunes
      [ -f "$F/wisdom" ] || { echo "STREAM=fortunes needs Debian's fortunes package (apt-get install fortunes)" >&2; return 2; }
      mapfile -t files < <(find "$F" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' ! -name ascii-art | sort);;
    *) echo "STREAM must be licenses or fortunes, not '$STREAM'" >&2; return 2;;
  esac
  "$build/trident" data prepare "${files[@]}" -o "$dir/$STREAM" >/dev/null
  local shards=("$dir/${STREAM}"_train_*.bin)
  [ ${#shards[@]} -eq 1 ] || { echo "expected one training shard, got ${#shards[@]}" >&2; return 2; }
  token_shard=${shards[0]}
}
