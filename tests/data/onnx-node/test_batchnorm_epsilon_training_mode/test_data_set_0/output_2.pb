B
output_varJ‰>îœX?êÎ!>