" .hodu files are Hodu programs
autocmd BufRead,BufNewFile *.hodu setfiletype hodu
