" Hodu buffers: comments start with #, and gq formats through hodu fmt -
" (gggqG formats the whole file; hodu must be on PATH).
if exists("b:did_ftplugin")
  finish
endif
let b:did_ftplugin = 1
setlocal commentstring=#\ %s
setlocal formatprg=hodu\ fmt\ -
let b:undo_ftplugin = "setlocal commentstring< formatprg<"
