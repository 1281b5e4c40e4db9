cd /tmp/i29/wt
for r in 1 2 3; do
 for sw in default 0.0005; do
  if [ $sw = default ]; then unset XB_SWITCH; else export XB_SWITCH=$sw; fi
  /work/main/.venv/bin/python -m bench matrix --launcher netns --link 5gbit --topologies 1x1,2x1 --models resnet18 --batch-sizes 16 --comm-hooks none,powersgd --results /tmp/i29/exp2-$sw.jsonl -- --steps 20 --warmup-steps 10 --powersgd-warmup 5 --image-size 32 --log-every 0
 done
done
unset XB_SWITCH
echo EXP2DONE
